"""nicsim as the link partner of any RTL design: a simulated host with the model NIC, its
driver and verbs, on the other end of a cable from the design's Ethernet AXI-Stream ports.

    your DUT  m_axis_tx_* --AXI-Stream--> EthMac --nicsim Link (taps, faults)--> model NIC
              s_axis_rx_* <--AXI-Stream--                                        host "b":
                                                                                 kernel, verbs

An engineer validating their own RoCEv2 RTL gets a protocol-correct peer (the SimPy NIC model:
RC/UC/UD requester, responder, completer, go-back-N, DCQCN if configured), byte-exact traffic,
a pcap of both directions, loss and corruption on demand, and the verbs API on the model's
side to post work and check completions and memory. The design needs only a clock, a reset
and the two streams (a frame per packet, tlast at its end, no FCS; tuser on the last beat
marks a bad frame, which is dropped).

    peer = ModelPeer(dut, dut.clk, dut.rst, dut_mac="02:00:00:00:00:0a", dut_ip="10.0.0.1")
    ...  # reset the design
    peer.start()
    result = await peer.run(program, ...)   # program(world, ...) runs verbs on peer.host

`program` runs in a thread (cocotb.task.bridge) with the world as its first argument, as any
nicsim driver program does; it may block on the model (polling a CQ advances SimPy time, and
the RTL follows it: nicsim.cosim.clock). `cosim_world` (host a's NIC is nsnic's own RTL) is
built on this class.

`strict=True` makes the peer a scoreboard (nicsim.cosim.strict): the first frame of the
design that the model's receive path refuses for breaking the protocol (ICRC, PSN, opcode
sequence, pad and length, a response to nothing sent, an unknown QP...) raises
ProtocolViolation, an AssertionError naming the QP, the rule and its IBA clause, expected
and actual, the frame, and the QP's last packets expected against actual (`peer.log(qpn)`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from cocotb.clock import Clock
from cocotb.task import bridge

from nicsim.cosim.clock import TimeCoupler
from nicsim.cosim.mac import EthMac
from nicsim.cosim.rates import CLK_NS
from nicsim.cosim.strict import Entry, StrictChecker, format_log
from nicsim.fabric.faults import FaultConfig
from nicsim.fabric.link import Link, LinkConfig
from nicsim.host.host import CpuCosts, Host
from nicsim.host.pcie import PcieConfig
from nicsim.nic.config import NicConfig
from nicsim.nic.violations import Rule
from nicsim.wire.packet import ETH_FCS, ETH_MIN_FRAME, ETH_PREAMBLE
from nicsim.world import World


def link_window_ns(link: LinkConfig) -> float:
    """The shortest latency of a frame between the design and the model: propagation plus the
    shortest frame's time on the wire up to its last bit (the coupling window for a design
    whose only connection to nicsim is its Ethernet ports)."""
    return link.prop_ns + (ETH_PREAMBLE + ETH_MIN_FRAME + ETH_FCS) * 8.0 / link.rate_gbps


class ModelPeer:
    """A nicsim host `name` (MAC `mac`, IP `ip`) with the model NIC, cabled to a design.

    Either give the design (`dut`, `clk`, `rst` and the prefixes of its transmit and receive
    AXI-Stream ports, rx None for a design that only sends; the clock is started here at
    `clk_ns` unless `start_clock` is False), or
    an `eth` EthMac and `clock` TimeCoupler that already serve it (RtlNic has both), and
    optionally the `world` to add the host to. `dut_mac`, `dut_ip`: the design's addresses
    (the peer host's neighbour entry); `dut_name`: its name in the world's ports and the
    cable's. `pcap`: a capture of both directions of the cable.
    `strict_mac`: the MAC between the design and the cable is a CMAC's (nicsim.cosim.mac: an
    underrun aborts a frame, the receive stream cannot be held off); False: it waits.
    `strict`: raise ProtocolViolation on the first protocol violation in the frames the design
    sends (nicsim.cosim.strict), except the rules in `tolerate`; a per-QP log of the last
    `log_depth` packets (`log`). The link's `faults` lose and corrupt frames after they left
    the design, which the model then refuses: tolerate BAD_ICRC and PSN_SEQUENCE with them.
    """

    def __init__(self, dut: Any = None, clk: Any = None, rst: Any = None, *,  # noqa: ANN401
                 tx: str = "m_axis_tx", rx: str | None = "s_axis_rx",
                 eth: EthMac | None = None, clock: TimeCoupler | None = None,
                 world: World | None = None, name: str = "b", dut_name: str = "dut",
                 mac: str = "02:00:00:00:00:0b", ip: str = "10.0.0.2",
                 dut_mac: str = "02:00:00:00:00:0a", dut_ip: str = "10.0.0.1",
                 nic: NicConfig | None = None, pcie: PcieConfig | None = None,
                 link: LinkConfig | None = None, faults: FaultConfig | None = None,
                 pcap: str | Path | None = None, seed: int = 0, mem_size: int = 64 << 20,
                 clk_ns: float = CLK_NS, start_clock: bool = True,
                 costs: CpuCosts | None = None, strict_mac: bool = True,
                 strict: bool = False,
                 tolerate: Iterable[Rule] = (), log_depth: int = 32) -> None:
        self.link_cfg = link or LinkConfig()
        if eth is None or clock is None:
            if dut is None:
                raise ValueError("ModelPeer needs the design (dut, clk, rst) or eth and clock")
            clock = TimeCoupler(link_window_ns(self.link_cfg), clk_ns)
            if start_clock:
                Clock(clk, clk_ns, unit="ns").start()
            eth = EthMac(dut, clk, rst, clock, tx, rx, strict=strict_mac)
        self.eth = eth
        self.clock = clock
        self.world = world if world is not None else World(seed)
        w = self.world
        cfg = nic or NicConfig()
        w.add_host(name, replace(cfg, mac=mac, ip=ip, pcie=pcie or cfg.pcie), mem_size, costs)
        self.host: Host = w.hosts[name]
        self.nic = w.nics[name]
        self.cable = Link(w.env, self.link_cfg, f"{dut_name}-{name}", faults)
        self.dut_end = eth.connect(self.cable)
        self.nic.port.connect(self.cable)
        w.ports[f"{dut_name}.eth0"] = (self.cable, self.dut_end)
        w.ports[f"{name}.eth0"] = (self.cable, 1 - self.dut_end)
        self.host.neighbours[dut_ip] = dut_mac
        # The model NIC's only cable goes to the design: every frame it judges is the design's.
        self.checker = StrictChecker(self.nic, tolerate, log_depth) if strict else None
        if pcap is not None:
            from nicsim.fabric.pcap import PcapTap

            Path(pcap).parent.mkdir(parents=True, exist_ok=True)
            tap = PcapTap(pcap)
            self.cable.taps.append(tap)
            w.taps.append(tap)
        w.links.append(self.cable)
        from nicsim.driver.kernel.ib_core import Kernel

        Kernel(self.host)

    def start(self) -> None:
        """Couple SimPy to the design's clock (call after the design's reset, before `run`)."""
        self.clock.couple(self.world.env)

    async def run(self, program: Callable[..., Any], *args: Any) -> Any:  # noqa: ANN401
        """Run `program(world, *args)` (verbs on the peer host) in the driver thread while the
        design runs; returns what it returns. Strict: a violation raises out of the program
        (it happens while the program advances SimPy) and, should the program have caught it,
        here once it returns."""
        result = await bridge(program)(self.world, *args)
        self.check()
        return result

    def check(self) -> None:
        """Strict: raise the first protocol violation of the design, if there was one."""
        if self.checker is not None:
            self.checker.check()

    def log(self, qpn: int | None = None) -> list[Entry]:
        """Strict: the packets the design sent to the model's QP `qpn` (all QPs if None),
        oldest first, each expected against actual with the model's verdict."""
        if self.checker is None:
            raise RuntimeError("the per-QP log is kept by a strict peer: ModelPeer(strict=True)")
        return self.checker.log(qpn)

    def log_text(self, qpn: int | None = None) -> str:
        """`log(qpn)` as a table."""
        return format_log(self.log(qpn))

    def close(self) -> None:
        """Flush and close the pcap taps."""
        self.world.close()
