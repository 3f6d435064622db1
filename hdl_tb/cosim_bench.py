"""What the co-simulation benches share (host a's NIC the RTL, host b's the SimPy model, one
nicsim world: nicsim.cosim): one end of an RC connection (`Side`), running a driver program on
such a world (`run_program`), polling completions, and the frames host a sends when its NIC is
the model (`reference_frames`), which the RTL's must equal.
"""

from __future__ import annotations

import os
import random
import time

from cocotb.task import bridge

from nicsim.cosim.dma import pauses
from nicsim.cosim.rtl_nic import rtl_counters


class Side:
    """One end of an RC connection: context, PD, CQ, QP, one MR."""

    def __init__(self, host, mr_len: int, access: int) -> None:  # noqa: ANN001
        from nicsim.driver import enums as e
        from nicsim.driver.user.verbs import CQ, MR, PD, QP, Context, QPCap, QPInitAttr

        self.host = host
        self.ctx = Context("nsnic0", host=host)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 256)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                                         cap=QPCap(64, 64, 4, 4)))
        self.mr = MR(self.pd, mr_len, access)

    def connect(self, peer: Side, ip: str, mtu: int, **qp: int) -> None:
        """INIT, RTR, RTS towards `peer`; `qp` keys: psn, timeout, retry_cnt, access (the
        QP's remote rights; default LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ)."""
        from nicsim.driver import enums as e
        from nicsim.driver.user.verbs import GID, AHAttr, GlobalRoute, QPAttr

        from nicsim.workloads.endpoint import roce_v2_gid

        acc = qp.get("access", e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
                     e.IBV_ACCESS_REMOTE_READ)
        self.qp.to_init(QPAttr(qp_access_flags=acc))
        av = AHAttr(gr=GlobalRoute(dgid=GID("::ffff:" + ip),
                                   sgid_index=roce_v2_gid(self.ctx)[0]))
        self.qp.to_rtr(QPAttr(path_mtu=mtu, dest_qp_num=peer.qp.qp_num, rq_psn=qp.get("psn", 0),
                              max_dest_rd_atomic=4, min_rnr_timer=1, ah_attr=av))
        self.qp.to_rts(QPAttr(sq_psn=peer_psn(peer, qp), timeout=qp.get("timeout", 14),
                              retry_cnt=qp.get("retry_cnt", 7), rnr_retry=7, max_rd_atomic=4))


def seed_offset() -> int:
    """NICSIM_SEED (default 0): added to every bench's seeds, so a run can be repeated with
    other random stalls, reordering, traffic and faults (CI sweeps a few)."""
    return int(os.environ.get("NICSIM_SEED", "0"))


STRESS_P = 0.2  # each channel's chance of a pause in a cycle under `stress`


def stress(rtl, seed: int, p: float = STRESS_P) -> None:  # noqa: ANN001
    """Random backpressure on every channel the bench drives and an out-of-order DMA: the
    DMA slave pauses each of its five channels (nicsim.cosim.dma.PcieDmaSlave.stall) and
    answers out of order across IDs with interleaved read beats (reorder); the host's AXI4-Lite
    master pauses its address, data and response channels; the MAC pauses transmit and leaves
    idle cycles inside received frames (nicsim.cosim.mac.EthMac.pause). What the benches
    assert (memory, completions, CQEs, the frames) must hold whatever the timing."""
    rtl.dma.stall("all", p, seed)
    rtl.dma.reorder(seed)
    rtl.mac.pause(p, seed)
    wr, rd = rtl.axil.write_if, rtl.axil.read_if
    for i, ch in enumerate((wr.aw_channel, wr.w_channel, wr.b_channel, rd.ar_channel,
                            rd.r_channel)):
        ch.set_pause_generator(pauses(random.Random(seed * 11 + i), p))


def ack_timeout(w) -> int:  # noqa: ANN001
    """The shortest local ACK timeout (IBA 9.7.6.1.1: 4.096 us x 2^t) that outlasts twice a
    16 KiB message on the world's cable: the RTL acknowledges a message once its last packet
    is in, and a shorter timer would send again what is on its way (1 at 100 Gb/s, 3 at 10)."""
    from nicsim.nic.requester import transport_timeout_ns

    ns = 2 * 16384 * 8 / w.links[0].cfg.rate_gbps
    return next(t for t in range(1, 32) if transport_timeout_ns(t) >= ns)


def peer_psn(_peer: Side, qp: dict) -> int:
    return qp.get("psn", 0)


def speed_line(dut, rtl, what: str, res: dict, wall: float) -> None:  # noqa: ANN001
    c = rtl.clock
    cyc = c.now() * 1.0 / rtl.clk_ns
    dut._log.info(
        "%s: simulated %.1f us, %d RTL cycles in %.1f s (%.0f cycles/s); window %.0f ns, "
        "%d catch-ups, %.0f%% of the wall time in the RTL simulator; late %d; DMA %s; MAC %s; "
        "RTL %s", what, res["sim_ns"] / 1000, cyc, wall, cyc / wall, c.window_ns, c.catchups,
        100 * c.rtl_wall / wall, c.late, rtl.dma.counters, rtl.mac.counters, rtl_counters(dut))


async def run_program(dut, program, what: str, seed: int, bad: str = "",  # noqa: ANN001
                      faults=None, pcap: str | None = None,  # noqa: ANN001
                      injector=None, stall: tuple = (), mac_ok: bool = True,  # noqa: ANN001
                      stressed: bool = True) -> dict:
    """Run driver `program(w, seed, bad)` with host a's NIC the RTL: its result, with the
    link's faults, the late crossings, the frames the RTL sent and the MAC's counters.
    `injector`: the link's fault injector for both directions (an object with FaultInjector's
    apply and counters), instead of `faults`' random ones. `stall`: PcieDmaSlave.stall's
    arguments (channels, probability[, cycles]). `mac_ok`: fail on anything the strict MAC
    holds against the RTL (an underrun, a receive beat not taken, a frame that found no room
    in the MAC). `stressed`: under `stress` (the default)."""
    from nicsim.cosim import cosim_world

    w, rtl = cosim_world(dut, seed=seed, faults=faults, pcap=pcap)
    if injector is not None:
        w.links[0].faults = [injector, injector]
    rtl.mac.keep_sent = True
    await rtl.reset()
    if stressed:
        stress(rtl, seed)
    if stall:
        rtl.dma.stall(stall[0], stall[1], seed, *stall[2:])
    rtl.clock.couple(w.env)
    t0 = time.perf_counter()
    res = await bridge(program)(w, seed, bad)
    wall = time.perf_counter() - t0
    w.close()
    speed_line(dut, rtl, what, res, wall)
    res["faults"] = w.links[0].fault_counters() if w.links[0].faults is not None else {}
    res["late"] = rtl.clock.late
    res["rtl_sent"] = list(rtl.mac.sent)
    res["mac"] = mac = dict(rtl.mac.counters)
    if mac_ok:
        assert_mac_ok(mac)
    return res


def assert_mac_ok(mac: dict) -> None:
    """Nothing the strict MAC (nicsim.cosim.mac) holds against the design."""
    bad = {k: mac[k] for k in ("tx_underrun", "rx_not_ready", "rx_overflow") if mac[k]}
    assert not bad, f"the MAC: {bad}"


def poll_wcs(side: Side, n: int) -> list[tuple[int, int, int, int, int]]:
    """Up to `n` completions from side's CQ, as (wr_id, status, opcode, byte_len, vendor_err)
    (opcode and byte_len -1 on an error), polling every 5 us of the host's time."""
    from nicsim.driver import enums as e

    sent: list[tuple[int, int, int, int, int]] = []
    for _ in range(400):
        _n, wcs = side.cq.poll(16)
        sent += [(wc.wr_id, wc.status, wc.opcode if wc.status == e.IBV_WC_SUCCESS else -1,
                  wc.byte_len if wc.status == e.IBV_WC_SUCCESS else -1, wc.vendor_err)
                 for wc in wcs]
        if len(sent) >= n:
            break
        side.host.spend(5_000.0)
    return sent


def reference_frames(pcap: str, program, seed: int) -> list[bytes]:  # noqa: ANN001
    """The frames host a sends when its NIC is the model, for the same program (and the
    same completions at the reader, byte-exact memory)."""
    from scapy.utils import rdpcap

    from nicsim.cosim.world import MAC_A
    from nicsim.world import World

    mpcap = os.path.join(os.path.dirname(pcap), "model_" + os.path.basename(pcap))
    mw = World.two_hosts(seed, pcap=mpcap)
    ref = program(mw, seed, rtl=False)
    mw.close()
    assert ref["sent"] == ref["want"] and not ref["bad_at"], ref
    mac_a = bytes.fromhex(MAC_A.replace(":", ""))
    frames = [bytes(p) for p in rdpcap(mpcap) if bytes(p)[6:12] == mac_a]
    assert frames
    return frames
