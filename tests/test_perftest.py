"""`nicsim perftest`: perftest's output structure, its flag errors, values the model bounds,
and runs that repeat exactly under a seed."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from nicsim.apps.perftest import main
from nicsim.apps.perftest import run as perftest_run
from nicsim.apps.perftest.params import parse
from nicsim.cli import main as cli_main
from nicsim.fabric.link import LinkConfig
from nicsim.wire import Ext, packet_overhead

DASH = "-" * 87
NUM = r"\d+\.\d+"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def rows(out: str) -> list[list[str]]:
    """The result rows: the lines between the column heading and the closing dashes."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(" #bytes"))
    body = lines[start + 1:]
    end = body.index(DASH)
    return [ln.split() for ln in body[:end]]


def test_write_bw_prints_perftests_blocks_in_order() -> None:
    code, out, err = run("ib_write_bw", "-s", "4096", "-n", "200", "--report_gbits")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == DASH and lines[1].strip() == "RDMA_Write BW Test"
    expect = [r" Dual-port       : OFF\t\tDevice         : nsnic0",
              r" Number of qps   : 1\t\tTransport type : IB",
              r" Connection type : RC\t\tUsing SRQ      : OFF",
              r" PCIe relax order: ON\t\tLock-free      : OFF",
              r" ibv_wr\* API     : ON\t\tUsing Enhanced Reorder      : OFF",
              r" TX depth        : 128", r" CQ Moderation   : 100",
              r" CQE Poll Batch  : Dynamic", r" Mtu             : 4096\[B\]",
              r" Link type       : Ethernet", r" GID index       : 3",
              r" Max inline data : 0\[B\]", r" rdma_cm QPs\t : OFF",
              r" Data ex. method : Ethernet"]
    for pat, line in zip(expect, lines[2:], strict=False):
        assert re.fullmatch(pat, line), (pat, line)
    i = 2 + len(expect)
    assert lines[i] == DASH
    addr = (r" (local|remote) address: LID 0000 QPN 0x[0-9a-f]{4,} PSN 0x[0-9a-f]{4,6} "
            r"RKey 0x[0-9a-f]{6,} VAddr 0x[0-9a-f]{14,}")
    gid = r" GID: (\d{2,3}:){15}\d{2,3}"
    for k, side in enumerate(("local", "remote")):
        assert re.fullmatch(addr, lines[i + 1 + 2 * k]) and side in lines[i + 1 + 2 * k]
        assert re.fullmatch(gid, lines[i + 2 + 2 * k])
    # The GIDs are the hosts' IPv4-mapped addresses, each byte in decimal, as perftest prints.
    assert lines[i + 2].endswith("255:255:10:00:00:01")
    assert lines[i + 4].endswith("255:255:10:00:00:02")
    assert lines[i + 5] == DASH
    assert lines[i + 6] == (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]"
                            "   MsgRate[Mpps]")
    assert re.fullmatch(rf" 4096\s+200\s+{NUM}\s+{NUM}\s+\d+\.\d{{6}}", lines[i + 7])
    assert lines[i + 8:] == [DASH]


def _bound_gbps(rate: float, size: int, mtu: int) -> float:
    n = -(-size // mtu)
    pad = sum(-min(mtu, size - i * mtu) & 3 for i in range(n))
    return rate * size / (size + pad + n * packet_overhead(0) + Ext.RETH.size)


@pytest.mark.parametrize("size", [64, 4096, 65536])
def test_bandwidth_stays_under_the_wire_and_matches_its_message_rate(size: int) -> None:
    code, out, err = run("ib_write_bw", "-s", str(size), "-n", "300", "--report_gbits")
    assert code == 0, err
    (row,) = rows(out)
    peak, avg, rate = float(row[2]), float(row[3]), float(row[4])
    assert 0 < avg <= peak <= _bound_gbps(100.0, size, 4096) * 1.0001
    assert avg == pytest.approx(rate * 1e6 * size * 8 / 1e9, rel=0.01)


def _profile_gbps(name: str) -> float:
    from nicsim.profiles import load_profile

    return float(load_profile(name).values()["link"]["rate_gbps"])


@pytest.mark.parametrize("profile", ["cx4lx-10g", "cx5-100g", "cx6-hdr100", "irdma-10g",
                                     "rxe-25g"])  # (ernic-100g is RC only)
@pytest.mark.parametrize(("conn", "size"), [("UD", 64), ("UD", 1024), ("UD", 4096),
                                            ("UC", 64), ("UC", 4096), ("UC", 65536)])
def test_unacknowledged_sends_stay_under_the_wire(profile: str, conn: str, size: int) -> None:
    """A UD or UC send completes when its last packet has left the port (IBA 9.8.1), never
    before: the bandwidth a sender sees from its completions stays under the wire bound."""
    code, out, err = run("ib_send_bw", "-c", conn, "-s", str(size), "-n", "300", "-m", "1024"
                         if conn == "UC" else "4096", "--report_gbits", "--profile", profile)
    assert code == 0, err
    (row,) = rows(out)
    peak, avg = float(row[2]), float(row[3])
    mtu = 1024 if conn == "UC" else size
    n = -(-size // mtu)
    pad = sum(-min(mtu, size - i * mtu) & 3 for i in range(n))
    ext = Ext.DETH.size if conn == "UD" else 0
    bound = _profile_gbps(profile) * size / (size + pad + n * packet_overhead(ext))
    assert 0 < avg <= peak <= bound + 0.005, (peak, bound)  # (printed to 0.01 Gb/s)


def test_all_sizes_one_row_each_from_2_bytes() -> None:
    code, out, _ = run("ib_write_bw", "-a", "-n", "5", "-m", "1024")
    assert code == 0
    assert " Mtu             : 1024[B]" in out.splitlines()
    sizes = [int(r[0]) for r in rows(out)]
    assert sizes == [1 << i for i in range(1, 24)]
    # MiB/sec by default
    assert "BW average[MiB/sec]" in out


def _lat(tool: str, *extra: str) -> dict[str, float]:
    code, out, err = run(tool, "-n", "200", *extra)
    assert code == 0, err
    (row,) = rows(out)
    keys = ("t_min", "t_max", "t_typical", "t_avg", "t_stdev", "p99", "p999")
    return dict(zip(keys, map(float, row[2:]), strict=True))


def test_latency_is_at_least_wire_and_pcie_and_read_reports_the_round_trip() -> None:
    # One way: at least the frame on a 100 Gb/s wire, 2 m of cable and the receiver's PCIe
    # write (the default hardware: 200+ ns PCIe latency); a READ is a round trip.
    frame_ns = (packet_overhead(2) + Ext.RETH.size + 2) * 8 / 100.0
    one_way_min = (frame_ns + 10 + 200) / 1000
    w = _lat("ib_write_lat")
    r = _lat("ib_read_lat")
    s = _lat("ib_send_lat")
    assert w["t_min"] >= one_way_min and s["t_min"] >= one_way_min
    assert r["t_min"] >= 2 * one_way_min
    # Reported whole, a READ round trip is more than a WRITE's half of one.
    assert r["t_typical"] > w["t_typical"]
    for v in (w, r, s):
        assert v["t_min"] <= v["t_typical"] <= v["t_max"]


def test_same_seed_same_output_and_jitter_only_from_the_cpu_model(tmp_path: Path) -> None:
    prof = tmp_path / "jittery.yaml"
    prof.write_text("name: jittery\ntitle: default hardware, CPU costs that vary\n"
                    "cpu: {spread: 1.0}\n")
    a = run("ib_send_lat", "-n", "300", "--profile", str(prof), "--seed", "7")
    b = run("ib_send_lat", "-n", "300", "--profile", str(prof), "--seed", "7")
    assert a == b
    row = [float(x) for x in rows(a[1])[0][2:]]
    assert row[1] > row[0] and row[4] > 0  # t_max > t_min, stdev > 0
    fixed = _lat("ib_send_lat")  # every cost exact: every sample the same
    assert fixed["t_min"] == fixed["t_max"] and fixed["t_stdev"] == 0


def test_send_bw_keeps_the_receive_queue_fed() -> None:
    code, out, err = run("ib_send_bw", "-s", "1024", "-n", "2000", "-r", "64")
    assert code == 0, err
    (row,) = rows(out)
    assert int(row[1]) == 2000 and float(row[3]) > 0


def test_ud_send_is_capped_at_the_path_mtu() -> None:
    code, out, err = run("ib_send_bw", "-c", "UD", "-s", "9000", "-n", "50", "-m", "2048")
    assert code == 0, err
    assert " Connection type : UD\t\tUsing SRQ      : OFF" in out
    assert rows(out)[0][0] == "2048"


@pytest.mark.parametrize("tool", ["ib_send_bw", "ib_write_bw", "ib_send_lat", "ib_write_lat"])
def test_uc_runs_send_and_write_tools_on_uc_qps(tool: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    res = perftest_run(parse(tool, ["-c", "UC", "-s", "3000", "-n", "40", "-m", "1024"]),
                       out, err)
    assert " Connection type : UC\t\tUsing SRQ      : OFF" in out.getvalue()
    (row,) = rows(out.getvalue())
    assert row[:2] == ["3000", "40"] and float(row[2]) > 0
    # Both NICs ran UC QPs: requests executed, nothing acknowledged, nothing refused.
    for nic in res["world"].nics.values():
        c = nic.counters()
        assert c["responder.acks_sent"] == c["completer.acks"] == 0
        assert c["rx.qp_type_mismatch"] == 0 and c["responder.uc_msgs_dropped"] == 0
    executed = sum(n.counters()["responder.requests"] for n in res["world"].nics.values())
    if tool.endswith("_lat"):  # a ping-pong: 40 messages of 3 packets each way
        assert executed == 2 * 40 * 3
    else:  # (a bandwidth run ends at the sender's last completion: UC's is at send time)
        assert 0 < executed <= 40 * 3


def test_read_and_atomic_headers_show_outstanding_reads() -> None:
    for tool, title in (("ib_read_bw", "RDMA_Read BW Test"),
                        ("ib_atomic_lat", "Atomic FETCH_AND_ADD Latency Test")):
        code, out, _ = run(tool, "-n", "20", "-o", "4")
        assert code == 0
        # (perftest's dashed line and 'Device not recognized' come first on an unknown one)
        assert out.splitlines()[:3] == [DASH, DASH, " " * 20 + title]
        assert " Outstand reads  : 4" in out and "Max inline data" not in out
    code, out, _ = run("ib_read_lat", "-n", "20")
    addr = next(ln for ln in out.splitlines() if ln.startswith(" local address"))
    assert " OUT 0x10 RKey " in addr  # the device's max_qp_rd_atom, 16


@pytest.mark.parametrize("argv,lines", [
    (["ib_write_bw", "--bogus"], ["ib_write_bw: unrecognized option '--bogus'",
                                  " Invalid Command or flag."]),
    (["ib_read_lat", "-Z"], ["ib_read_lat: invalid option -- 'Z'"]),
    (["ib_write_bw", "-D", "0"], [" Duration period must be positive"]),
    (["ib_write_bw", "-D", "2", "-a"], ["Duration mode currently doesn't support running on "
                                        "all sizes."]),
    (["ib_write_bw", "-n", "3"], [" Iteration num should be between 5 and 4294967296"]),
    (["ib_write_bw", "-s", "x"], [" Message Size should be between 1 and 2147483647"]),
    (["ib_read_bw", "-c", "UC"], [" UC connection not possible in READ/ATOMIC verbs"]),
    (["ib_write_bw", "-c", "UD"], [" UD connection only possible in SEND verb"]),
    (["ib_write_bw", "-c", "XYZ"], [" Invalid Connection type. Please choose from "
                                    "{RC,UC,UD,XRC,DC,SRD}"]),
    (["ib_atomic_lat", "-c", "UC"], [" UC connection not possible in READ/ATOMIC verbs"]),
    (["ib_write_bw", "-c", "DC"], [" DC connections are not supported by nicsim's perftest "
                                   "(the simulated NIC has RC, UC and UD QPs)"]),
    (["ib_atomic_bw", "-s", "16"], ["Message size cannot be changed for Atomic tests "]),
    (["ib_write_bw", "-x", "5"], [" Failed to query GID index 5: nsnic0 has no such GID "
                                  "(nicsim exec -- cat /sys/class/infiniband/nsnic0/ports/1/"
                                  "gids/N lists them)"]),
])
def test_bad_flags_fail_as_perftest_does(argv: list[str], lines: list[str]) -> None:
    code, _out, err = run(*argv)
    assert code == 1
    got = err.splitlines()
    for ln in lines:
        assert ln in got
    assert "Traceback" not in err


def test_nicsim_options_fail_with_one_line() -> None:
    code, out, err = run("ib_write_bw", "--profile", "nosuch")
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "unknown profile 'nosuch'" in err
    code, _, err = run("ib_nosuch_bw")
    assert code == 2 and "unknown tool" in err
    code, out, err = run()
    assert code == 2 and out == "" and err.startswith("Usage: nicsim perftest TOOL")


def test_out_json_has_perftests_sections(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    code, out, _ = run("ib_write_lat", "-s", "64", "-n", "50", "--out_json",
                       f"--out_json_file={path}")
    assert code == 0
    doc = json.loads(path.read_text())
    assert doc["test_info"]["test"] == "RDMA_Write_Latency_Test"
    assert doc["test_info"]["Max_inline_data"] == 0
    res = doc["results"]
    assert res["MsgSize"] == 64 and res["n_iterations"] == 50
    assert f"{res['t_typical']:.2f}" in rows(out)[0]


def test_connectx_profile_inlines_small_latency_messages() -> None:
    code, out, _ = run("ib_send_lat", "-s", "32", "-n", "20", "--profile", "cx5-100g")
    assert code == 0 and " Max inline data : 236[B]" in out
    code, out, _ = run("ib_write_lat", "-n", "20", "--profile", "cx5-100g")
    assert " Max inline data : 220[B]" in out
    # a device perftest does not know gets no inline, and -I says so
    code, out, err = run("ib_write_lat", "-n", "20", "-I", "64")
    assert " Max inline data : 0[B]" in out
    assert "Device not recognized to implement inline feature. Disabling it" in err


def test_cli_dispatches_perftest(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["perftest", "ib_atomic_bw", "-n", "10", "-A", "CMP_AND_SWAP"]) == 0
    assert "Atomic CMP_AND_SWAP BW Test" in capsys.readouterr().out
    assert cli_main(["perftest", "ib_write_bw", "--nope"]) == 1


def test_breakdown_stamps_every_stage_in_causal_order(tmp_path: Path) -> None:
    png = tmp_path / "wf.png"
    js = tmp_path / "r.json"
    code, out, err = run("ib_write_lat", "-s", "64", "-n", "50", f"--waterfall={png}",
                         "--out_json", f"--out_json_file={js}")
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    stages = json.loads(js.read_text())["nicsim"]["breakdown"]["stages"]
    names = [s["stage"] for s in stages]
    assert names == ["post", "doorbell", "wqe_fetched", "translated", "first_out", "last_out",
                     "arrived", "placed", "ack_sent", "ack_received", "cqe_written", "polled"]
    assert all(s["wrs"] == 50 for s in stages)
    t = {s["stage"]: s["since_post_mean_ns"] for s in stages}
    chain = ["post", "doorbell", "wqe_fetched", "translated", "first_out", "last_out",
             "arrived", "ack_sent", "ack_received", "cqe_written", "polled"]
    assert all(t[x] <= t[y] for x, y in zip(chain, chain[1:], strict=False))
    assert t["placed"] > t["arrived"]
    # From the last bit out to its arrival: the default link's propagation.
    assert t["arrived"] - t["last_out"] == pytest.approx(LinkConfig().prop_ns)
    assert "Breakdown of 50 WRs" in out


def test_breakdown_counts_only_signalled_completions_in_bandwidth_runs() -> None:
    code, out, _ = run("ib_write_bw", "-s", "1024", "-n", "300", "-Q", "100", "--breakdown")
    assert code == 0
    lines = {ln.split()[0]: ln.split() for ln in out.splitlines()[-14:] if ln.strip()}
    assert lines["post"][1] == "300" and lines["ack_received"][1] == "300"
    assert lines["cqe_written"][1] == "3" and lines["polled"][1] == "3"


def test_run_breakdown_in_report_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["run", "--breakdown", "--no-pcap", "--quiet", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["breakdown"]
    by = {s["stage"]: s for s in d["stages"]}
    assert d["wrs"] == 14 and by["post"]["wrs"] == 14 and by["polled"]["wrs"] == 14
    # READs and atomics place nothing at the responder: 10 of the default's 14 WRs do.
    assert by["placed"]["wrs"] == 10
    assert by["polled"]["since_post_mean_ns"] >= by["cqe_written"]["since_post_mean_ns"]


def test_run_breakdown_needs_two_hosts(capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[1]
    assert cli_main(["run", str(root / "examples/incast.yaml"), "--breakdown", "--no-pcap",
                     "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --breakdown: needs the two-host topology") and \
        len(err.splitlines()) == 1


def _slow(tmp_path: Path) -> str:
    """The default NIC on a 100 Mb/s link: a second of simulated traffic is quick to run."""
    prof = tmp_path / "slow.yaml"
    prof.write_text("name: slow\ntitle: default NIC, 0.1 Gb/s link\nlink: {rate_gbps: 0.1}\n")
    return str(prof)


def test_duration_bandwidth_counts_the_window(tmp_path: Path) -> None:
    code, out, _ = run("ib_write_bw", "-D", "1", "-s", "4096", "--report_gbits",
                       "--profile", _slow(tmp_path))
    assert code == 0
    assert " WARNING: BW peak won't be measured in this run." in out.splitlines()
    (row,) = rows(out)
    iters, peak, avg = int(row[1]), float(row[2]), float(row[3])
    # One second at 0.1 Gb/s: under the wire's bound for 4 KiB, and most of it.
    assert peak == 0 and 0.9 * _bound_gbps(0.1, 4096, 4096) < avg <= _bound_gbps(0.1, 4096, 4096)
    assert iters == pytest.approx(avg * 1e9 / 8 / 4096, rel=0.01)


def test_duration_latency_reports_average_and_rate(tmp_path: Path) -> None:
    code, out, _ = run("ib_send_lat", "-D", "1", "-s", "4096", "--profile", _slow(tmp_path))
    assert code == 0
    assert " #bytes        #iterations       t_avg[usec]    tps average" in out
    (row,) = rows(out)
    iters, t_avg, tps = int(row[1]), float(row[2]), float(row[3])
    assert tps == pytest.approx(iters, rel=0.01)  # exchanges in a one-second window
    assert t_avg == pytest.approx(1e6 / iters / 2, rel=0.01)  # half of each exchange


def test_invalid_mtu_runs_at_the_ports_mtu_with_perftests_lines() -> None:
    code, out, err = run("ib_write_bw", "-m", "9000", "-n", "10")
    assert code == 0
    assert err.splitlines()[:3] == [" Invalid MTU - 9000 ",
                                    " Please choose mtu from {256,512,1024,2048,4096}",
                                    " Will run with the port active mtu - 5"]
    assert " Mtu             : 4096[B]" in out


# -- bidirectional (-b) and the server's output (--server-output) ------------------------------


def _wire_gbps(rate: float, size: int, mtu: int = 4096) -> float:
    """The most payload a wire carries one way: no extension header at all (a SEND's)."""
    n = -(-size // mtu)
    pad = sum(-min(mtu, size - i * mtu) & 3 for i in range(n))
    return rate * size / (size + pad + n * packet_overhead(0))


def _perftest(tool: str, *argv: str) -> tuple[dict, str]:
    out, err = io.StringIO(), io.StringIO()
    res = perftest_run(parse(tool, list(argv)), out, err)
    return res, out.getvalue()


@pytest.mark.parametrize(("tool", "extra"), [("ib_write_bw", ()), ("ib_read_bw", ()),
                                             ("ib_send_bw", ("-q", "2")),
                                             ("ib_atomic_bw", ())])
def test_bidirectional_moves_traffic_both_ways_and_reports_the_sum(tool: str,
                                                                    extra: tuple) -> None:
    size = 8 if tool == "ib_atomic_bw" else 65536
    nq = int(extra[1]) if extra else 1
    argv = [*(["-s", str(size)] if size != 8 else []), "-n", "200", "--report_gbits", *extra]
    uni, _ = _perftest(tool, *argv)
    bi, out = _perftest(tool, "-b", *argv)
    # Unidirectional, host b only answers; with -b it posts as well: each NIC executed the
    # other's requests, and (for the big messages) each port carried a direction's data.
    assert uni["world"].nics["a"].counters()["responder.requests"] == 0
    for nic in bi["world"].nics.values():
        c = nic.counters()
        assert c["responder.requests"] >= 200 * nq
        if size > 8:
            assert c["port.tx_bytes"] >= 200 * nq * size
    (u,), (r,), (sr,) = uni["results"], bi["results"], bi["server_results"]
    # Each end measured its own direction and prints the sum of both (perftest's -b table).
    assert r.own_avg is not None and sr.own_avg is not None
    assert r.bw_avg == pytest.approx(r.own_avg + sr.own_avg)
    assert r.bw_avg == sr.bw_avg and r.iters == 200 * nq
    assert rows(out) == [[str(size), str(200 * nq), f"{r.bw_peak:.2f}", f"{r.bw_avg:.2f}",
                          f"{r.msg_rate:.6f}"]]
    # About twice one direction, and physical: each direction under its wire, the sum and
    # its peaks under twice that.
    assert r.bw_avg > 1.9 * u.bw_avg
    bound = _wire_gbps(100.0, size)
    assert max(r.own_avg, sr.own_avg) <= bound
    assert r.bw_avg <= r.bw_peak <= 2 * bound


def test_bidirectional_output_parses_like_the_unidirectional_one() -> None:
    code, out, err = run("ib_send_bw", "-b", "-s", "4096", "-n", "300", "--report_gbits")
    assert code == 0, err
    code, uni, _ = run("ib_send_bw", "-s", "4096", "-n", "300", "--report_gbits")
    lines, ulines = out.splitlines(), uni.splitlines()
    assert lines[1] == " " * 20 + "Send Bidirectional BW Test"
    # Both ends' depths (each end sends and receives), then the unidirectional header.
    tx = ulines.index(" TX depth        : 128")
    assert lines[tx:tx + 2] == [" TX depth        : 128", " RX depth        : 300"]
    assert lines[2:tx] == ulines[2:tx] and lines[tx + 2:-2] == ulines[tx + 1:-2]
    (row,) = rows(out)
    assert re.fullmatch(rf" 4096\s+300\s+{NUM}\s+{NUM}\s+\d+\.\d{{6}}", lines[-2])
    assert lines[-1] == DASH and row[:2] == ["4096", "300"]
    # -b is for bandwidth tests, as perftest says.
    code, _, err = run("ib_write_lat", "-b")
    assert code == 1 and err.splitlines() == [" Bidirectional is only available in BW test",
                                              " Parser function exited with Error"]


def test_bidirectional_send_duration_counts_both_directions_at_each_end(tmp_path: Path) -> None:
    srv = tmp_path / "server.txt"
    code, out, err = run("ib_send_bw", "-b", "-D", "1", "-s", "4096", "--report_gbits",
                         "--profile", _slow(tmp_path), f"--server-output={srv}")
    assert code == 0, err
    bound = _wire_gbps(0.1, 4096)
    for text in (out, srv.read_text()):
        (row,) = rows(text)
        iters, avg = int(row[1]), float(row[3])
        # (perftest's run_iter_bi counts receives and send completions in the window)
        assert 1.8 * bound < avg <= 2 * bound + 0.005
        assert iters == pytest.approx(avg * 1e9 / 8 / 4096, rel=0.02)


def _blocks(text: str) -> list[list[str]]:
    """The output's blocks between dashed lines (the banner and warnings in the first)."""
    out: list[list[str]] = [[]]
    for ln in text.splitlines():
        if ln == DASH:
            out.append([])
        else:
            out[-1].append(ln)
    return out


def test_server_output_has_the_servers_header_addresses_and_table(tmp_path: Path) -> None:
    srv = tmp_path / "server.txt"
    code, out, err = run("ib_write_bw", "-s", "4096", "-n", "200", "--report_gbits")
    code2, out2, _ = run("ib_write_bw", "-s", "4096", "-n", "200", "--report_gbits",
                         f"--server-output={srv}")
    assert code == code2 == 0, err
    assert out2 == out  # the client's output is what it was
    text = srv.read_text()
    assert text.endswith(DASH + "\n")
    banner, head, addr, table, tail = _blocks(text)
    assert banner == ["", "*" * 36, "* Waiting for client to connect... *", "*" * 36]
    client_head = _blocks(out)[1]
    # The server's header is the client's without TX depth (perftest prints it on the
    # sending side only).
    assert head == [ln for ln in client_head if not ln.startswith(" TX depth")]
    # Its own address first (host b, 10.0.0.2), then the client's: the client's two
    # lines swapped.
    client_addr = _blocks(out)[2]
    assert addr[0].startswith(" local address") and addr[1].endswith("255:255:10:00:00:02")
    assert addr[2].startswith(" remote address") and addr[3].endswith("255:255:10:00:00:01")
    assert [a.split(":", 1)[1] for a in addr] == [a.split(":", 1)[1] for a in
                                                  client_addr[2:] + client_addr[:2]]
    # A WRITE server's table is the client's report, sent to it at the end.
    assert table == _blocks(out)[3] and tail == []


def test_server_output_of_send_bw_is_the_receivers_own_measure() -> None:
    argv = ("ib_send_bw", "-s", "65536", "-n", "300", "--report_gbits")
    code, out, err = run(*argv, "--server-output=-")
    assert code == 0, err
    # "-": the server's output follows the client's on stdout.
    _, client, _ = run(*argv)
    assert out.startswith(client)
    server = out[len(client):]
    # A SEND server measures no peak, and says so first.
    assert server.splitlines()[0] == " WARNING: BW peak won't be measured in this run."
    head = _blocks(server)[1]
    assert " RX depth        : 300" in head and not any("TX depth" in ln for ln in head)
    (row,) = rows(server)
    assert row[:3] == ["65536", "300", "0.00"]
    # From its first receive to its last (perftest's arithmetic: n messages over that span,
    # which holds n-1 of them and less, the first receive's own latency): about the client's
    # figure. The receives themselves came no faster than the wire.
    avg = float(row[3])
    assert avg == pytest.approx(float(rows(client)[0][3]), rel=0.02)
    span_ns = 300 * 65536 * 8 / avg
    wire_ns = 65536 * 8 / _wire_gbps(100.0, 65536)
    assert span_ns >= 298 * wire_ns


@pytest.mark.parametrize(("tool", "table"), [("ib_write_lat", True), ("ib_send_lat", True),
                                              ("ib_read_lat", False),
                                              ("ib_atomic_lat", False)])
def test_server_output_of_latency_tests(tmp_path: Path, tool: str, table: bool) -> None:
    srv = tmp_path / "server.txt"
    code, out, err = run(tool, "-n", "100", f"--server-output={srv}")
    assert code == 0, err
    # (from the banner on: an unknown device's inline note puts a dashed line before it)
    text = srv.read_text()
    blocks = _blocks(text[text.index("\n" + "*" * 36):])
    assert blocks[1][0].strip() == _blocks(out)[-4][0].strip()  # the header: the test's title
    assert blocks[-1] == [] and len(blocks[2]) == 4  # two address lines, each with its GID
    if table:
        # The ping-pong's other end times its own posts: a table like the client's.
        assert blocks[3][0] == _blocks(out)[3][0] and len(rows(srv.read_text())) == 1
        assert rows(srv.read_text())[0][:2] == rows(out)[0][:2]
    else:  # a READ or atomic server only waits: its address lines end its output
        assert len(blocks) == 4


@pytest.mark.parametrize(("index", "local"), [
    ("0", "254:128:00:00:00:00:00:00:00:00:00:255:254:00:00:10"),  # link-local, RoCE v1
    ("1", "254:128:00:00:00:00:00:00:00:00:00:255:254:00:00:10"),  # link-local, RoCE v2
    ("2", "00:00:00:00:00:00:00:00:00:00:255:255:10:00:00:01"),  # IPv4-mapped, RoCE v1
])
def test_each_gid_of_the_table_carries_traffic(index: str, local: str) -> None:
    """-x picks any entry of the port's GID table, as on a ConnectX port (show_gids); the
    run moves its data and prints the entry's GID."""
    code, out, err = run("ib_write_bw", "-x", index, "-s", "4096", "-n", "50",
                         "--report_gbits")
    assert code == 0, err
    assert f" GID index       : {index}" in out.splitlines()
    assert f" GID: {local}" in out.splitlines()
    assert re.search(rf"^ 4096\s+50\s+{NUM}", out, re.M)
