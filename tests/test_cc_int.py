"""INT for HPCC: the trailer's bytes (nicsim.wire.telemetry), switches stamping frames as they
leave, receivers echoing the records in ACKs, and captures that the pcap checker and tshark
still read as valid RoCEv2 (the ICRC untouched)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from nicsim.fabric.pcap import check_pcap
from nicsim.fabric.switch import SwitchConfig
from nicsim.fabric.topology import Shape, TopologySpec
from nicsim.nic.cc import cc_from_dict
from nicsim.nic.config import NicConfig
from nicsim.wire import FrameBuilder, Opcode, Path, parse, reth, telemetry
from nicsim.workloads.bulk import incast
from nicsim.world import World

TSHARK = shutil.which("tshark")
V4 = Path(bytes.fromhex("020000000001"), bytes.fromhex("020000000002"), bytes([10, 0, 0, 1]),
          bytes([10, 0, 0, 2]), 0xC123, dscp=26)


def test_hop_records_pack_and_unpack():
    code = telemetry.rate_code(100.0)
    h = telemetry.unpack_hop(telemetry.pack_hop(code, 123_456_789, 1_000_064, 8_000))
    assert h == telemetry.IntHop(100.0, 123_456_789 % (1 << 24), 1_000_064 // 128 * 128, 8_000)
    assert telemetry.ts_delta(5, (1 << 24) - 5) == 10  # modulo the widths
    assert telemetry.bytes_delta(0, telemetry.BYTES_MOD - 128) == 128
    with pytest.raises(ValueError, match="not 12.5"):
        telemetry.rate_code(12.5)


def test_a_stamped_frame_keeps_its_roce_packet_and_icrc():
    f = FrameBuilder(V4).build(Opcode.RC_RDMA_WRITE_ONLY, 0x11, 7, reth(0x1000, 5, 64),
                               bytes(64), ackreq=True)
    end = telemetry.datagram_end(f)
    assert end == len(f)
    hop = telemetry.pack_hop(4, 1000, 2000, 3000)
    one = telemetry.stamp(f, hop)
    two = telemetry.stamp(one, hop)
    assert one is not None and two is not None
    assert len(two) == len(f) + telemetry.SHIM_LEN + 2 * telemetry.HOP_LEN
    p = parse(two)  # ICRC checked: the trailer is outside what it covers
    assert p.psn == 7 and p.payload_len == 64
    tr = telemetry.trailer(two, end)
    assert tr is not None and len(telemetry.hops(tr)) == 2 and not telemetry.is_echo(tr)
    echoed = f + telemetry.echo(tr)
    assert telemetry.stamp(echoed, hop) is None  # switches leave an echo alone
    assert telemetry.stamp(b"\0" * 60, hop) is None  # not RoCEv2


def hpcc_star(tmp_path, n: int = 4):  # type: ignore[no-untyped-def]
    cc = cc_from_dict({"algorithm": "hpcc", "base_rtt_us": 2, "rai_mbps": 1000})
    w = World.from_topology(TopologySpec(Shape.STAR, hosts=n + 1),
                            nic=NicConfig(cc=cc, ack_coalesce=1),
                            switch=SwitchConfig(int_telemetry=True))
    w.tap("h0.eth0", tmp_path / "h0.pcap")  # the receiver's ACKs, echoing INT
    w.tap("sw0.p0", tmp_path / "p0.pcap")  # data toward the receiver, stamped
    return w


def test_hpcc_on_a_star_stamps_echoes_and_reacts(tmp_path):
    w = hpcc_star(tmp_path)
    r = incast(w, ["h1", "h2", "h3", "h4"], "h0", msgs=24)
    assert r.ok, r.errors
    w.close()
    c = w.switches["sw0"].counters()
    assert c["p0.int_stamped"] > 0 and c["p0.int_bytes"] == 12 * c["p0.int_stamped"]
    s = w.nics["h1"].counters()
    assert s["cc.int_acks"] > 100 and s["cc.mi_md"] > 0
    _, goodput = r.window(0.5)
    assert goodput > 60.0
    # the senders were slowed: the deepest queue is far below what 4 line-rate senders build
    # without congestion control in the same time (megabytes)
    assert max(r.queue) < 1_500_000
    for name in ("h0.pcap", "p0.pcap"):
        rep = check_pcap(tmp_path / name)
        assert rep.roce_frames > 0 and not rep.bad, rep.bad[:3]


@pytest.mark.skipif(TSHARK is None, reason="tshark not installed")
def test_tshark_reads_int_frames_as_roce_with_a_trailer(tmp_path):
    w = hpcc_star(tmp_path, 2)
    assert incast(w, ["h1", "h2"], "h0", msgs=4).ok
    w.close()
    out = subprocess.run([TSHARK, "-r", str(tmp_path / "p0.pcap"), "-T", "fields", "-e",
                          "infiniband.bth.opcode", "-e", "eth.trailer", "-e", "_ws.malformed"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line.split("\t") for line in out.splitlines() if line]
    assert rows and all(r[0] for r in rows)  # every frame dissected as InfiniBand (RoCEv2)
    assert all(not r[2] for r in rows)  # nothing malformed
    stamped = [r for r in rows if r[1].startswith("49")]
    assert len(stamped) > len(rows) // 2  # data frames carry the shim 0x49 ...
    assert all(r[1][2:4] == "10" and r[1][4:6] == "01" for r in stamped)  # v1, 1 hop
