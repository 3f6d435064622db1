"""`nicsim calibrate`: figures made by the model itself at a known parameter set (not the
base's), written as perftest text and --out_json files with +-2% noise, give back that
parameter set; bad inputs get one line and exit status 2; every figure has a leave-one-out
prediction. Iterations and evaluations are kept small (the whole file runs in well under a
minute)."""

from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from nicsim.apps.perftest import run
from nicsim.apps.perftest.params import parse
from nicsim.calibrate.inputs import read_file
from nicsim.cli import main
from nicsim.profiles import load_profile

BASE = "cx6-hdr100"  # pcie.latency_ns 200, tx+rx pipeline 100+120, wqe_parse_cycles 124
TRUTH = {"pcie": {"latency_ns": 300.0},
         "nic": {"tx_pipeline_ns": 150.0, "rx_pipeline_ns": 180.0, "wqe_parse_cycles": 200}}
# Each figure identifies something: small inline latencies the pipeline and PCIe together,
# a non-inline one (-I 0: the payload is read over PCIe) and a READ the PCIe apart, small
# WRITE message rates the per-WQE cost.
RUNS = [("send_lat_32.txt", "ib_send_lat -s 32"),
        ("write_lat_64.json", "ib_write_lat -s 64 -I 0"),
        ("read_lat_2.txt", "ib_read_lat -s 2"),
        ("write_bw_64.txt", "ib_write_bw -s 64 --report_gbits"),
        ("write_bw_512.json", "ib_write_bw -s 512")]


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _noisy_text(text: str, k: float) -> str:
    """perftest's text with the table row's measured columns scaled by k."""
    lines = text.splitlines()
    i = next(i for i, ln in enumerate(lines) if "#bytes" in ln) + 1
    w = lines[i].split()
    lines[i] = " " + "    ".join(w[:2] + [f"{float(x) * k:.6f}" for x in w[2:]])
    return "\n".join(lines) + "\n"


def make_figures(d: Path, seed: int = 7) -> list[float]:
    """RUNS simulated under TRUTH, written as perftest writes them, each scaled by 1 +- 2%."""
    truth = d / "truth.yaml"
    truth.write_text(yaml.safe_dump({"name": "truth", "title": "truth", "base": BASE,
                                     **TRUTH}))
    rng = random.Random(seed)
    ks = []
    for name, cmd in RUNS:
        k = 1 + rng.uniform(-0.02, 0.02)
        ks.append(k)
        tool, *args = cmd.split()
        argv = [*args, "-n", "200", "--profile", str(truth)]
        if name.endswith(".json"):
            argv += ["--out_json_file", str(d / name)]
        out = io.StringIO()
        run(parse(tool, argv), out, io.StringIO())
        if name.endswith(".json"):
            doc = json.loads((d / name).read_text())
            doc["results"] = {key: v if key in ("MsgSize", "n_iterations") else v * k
                              for key, v in doc["results"].items()}
            (d / name).write_text(json.dumps(doc, indent=2))
        else:
            (d / name).write_text(_noisy_text(out.getvalue(), k))
    return ks


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    d = tmp_path_factory.mktemp("calibrate")
    make_figures(d)
    out = d / "my-nic.yaml"
    code, stdout, err = _cli(["calibrate", *(str(d / n) for n, _ in RUNS), "--base", BASE,
                              "--out", str(out), "--json", "--iters", "100",
                              "--max-evals", "14"])
    assert code == 0, err
    return json.loads(stdout), out


def test_recovers_known_parameters(fitted: tuple[dict[str, Any], Path]) -> None:
    rep, out = fitted
    got = {p["name"]: p for p in rep["parameters"]}
    assert all(got[n]["fitted"] for n in ("pcie.latency_ns", "nic.pipeline_ns",
                                          "nic.wqe_parse_cycles"))
    assert got["pcie.latency_ns"]["value"] == pytest.approx(300, rel=0.15)
    assert got["nic.pipeline_ns"]["value"] == pytest.approx(330, rel=0.2)
    assert got["nic.wqe_parse_cycles"]["value"] == pytest.approx(200, rel=0.06)
    assert rep["fit_error"]["max"] < 0.04  # (the noise is 2%)
    # The CPU costs: cx6-hdr100 sets none, so they are not fitted and the report says so.
    assert any(n.startswith("cpu.post_send_ns: not fitted") for n in rep["not_fitted"])
    prof = load_profile(str(out))
    assert prof.sections["pcie"]["latency_ns"] == pytest.approx(
        got["pcie.latency_ns"]["value"])
    text = out.read_text()
    assert "base: cx6-hdr100" in text and "send_lat_32.txt" in text
    assert set(prof.sources) >= {"pcie.latency_ns", "nic.tx_pipeline_ns",
                                 "nic.rx_pipeline_ns", "nic.wqe_parse_cycles"}
    # Only the fitted fields are written; the rest comes from the base.
    assert set(yaml.safe_load(text)) == {"name", "title", "base", "pcie", "nic"}
    # nicsim perftest and nicsim run take it.
    p = parse("ib_send_lat", ["-s", "32", "-n", "20", "--profile", str(out)])
    res = run(p, io.StringIO(), io.StringIO())
    send = next(f for f in rep["figures"] if f["tool"] == "ib_send_lat")
    assert res["results"][-1].t_typical == pytest.approx(send["simulated"], rel=0.01)
    code, stdout, err = _cli(["run", "--profile", str(out), "--no-pcap", "--quiet"])
    assert code == 0, err
    assert "integrity: OK" in stdout


def test_leave_one_out_per_figure(fitted: tuple[dict[str, Any], Path]) -> None:
    rep, _ = fitted
    assert len(rep["figures"]) == len(RUNS)
    for f in rep["figures"]:
        assert f["loo_ratio"] is not None and f["loo_linear_ratio"] is not None
        assert f["loo_simulated"] == pytest.approx(f["published"] * f["loo_ratio"])
    assert rep["loo_error"]["figures"] == len(RUNS)
    # a prediction from the other figures is worse than, or as good as, the fit
    assert rep["loo_error"]["rms"] >= rep["fit_error"]["rms"] * 0.99
    assert rep["loo_error"]["max"] < 0.15


def test_text_report(tmp_path: Path) -> None:
    """One latency figure: the pipeline and PCIe latency cannot both be identified, nor the
    per-WQE cost without a BW figure; they stay at the base's values and the report says
    so. The text report lists the figure against the fit."""
    (tmp_path / "lat.txt").write_text(LAT_TEXT)
    code, out, err = _cli(["calibrate", str(tmp_path / "lat.txt"), "--base", BASE, "--out",
                           str(tmp_path / "one.yaml"), "--iters", "20", "--max-evals", "6"])
    assert code == 0, err
    assert "not identified" in out and "nic.wqe_parse_cycles" in out
    assert "lat.txt: ib_send_lat 32 B t_typical_us" in out
    assert "leave-one-out error" in out
    doc = yaml.safe_load((tmp_path / "one.yaml").read_text())
    assert "wqe_parse_cycles" not in doc.get("nic", {})
    load_profile(str(tmp_path / "one.yaml"))


LAT_TEXT = """\
---------------------------------------------------------------------------------------
                    Send Latency Test
 Dual-port       : OFF\t\tDevice         : mlx5_0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 PCIe relax order: ON
 ibv_wr* API     : ON
 TX depth        : 1
 Mtu             : 1024[B]
 Link type       : Ethernet
 GID index       : 3
 Max inline data : 236[B]
 rdma_cm QPs\t : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 local address: LID 0000 QPN 0x0128 PSN 0x6fbc2a
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:01:02
 remote address: LID 0000 QPN 0x0127 PSN 0x3f2a09
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:01:01
---------------------------------------------------------------------------------------
{table}
---------------------------------------------------------------------------------------
""".format(table=(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    "
                  "t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% "
                  "percentile[usec] \n"
                  " 32      1000          0.88           3.01         0.91     \t       "
                  "0.92        \t0.05   \t\t1.10    \t\t3.01   "))

BW_ALL = """\
 WARNING: BW peak won't be measured in this run.
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : mlx5_1
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 TX depth        : 128
 CQ Moderation   : 100
 Mtu             : 4096[B]
 Link type       : IB
 Max inline data : 0[B]
 rdma_cm QPs\t : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 2          5000           0.00               6.82   \t\t     3.574181
 4          5000           0.00               13.65  \t\t     3.578012
 65536      5000           0.00               11740.10\t\t     0.187842
---------------------------------------------------------------------------------------
"""


def test_reads_text_tables_and_flags(tmp_path: Path) -> None:
    f = tmp_path / "bw.txt"
    f.write_text(BW_ALL)
    figs = read_file(str(f))
    assert [(x.size, x.metric) for x in figs] == [(2, "msg_rate_mpps"), (4, "msg_rate_mpps"),
                                                  (65536, "bw_gbps")]
    assert figs[0].tool == "ib_write_bw" and figs[0].value == pytest.approx(3.574181)
    assert figs[2].value == pytest.approx(11740.10 * 0x100000 * 8 / 1e9)
    assert figs[0].flags == ["-c", "RC", "-q", "1", "-m", "4096", "-t", "128", "-Q", "100",
                             "-I", "0"]
    lat = tmp_path / "lat.txt"
    lat.write_text(LAT_TEXT)
    (g,) = read_file(str(lat))
    assert (g.tool, g.size, g.metric, g.value) == ("ib_send_lat", 32, "t_typical_us", 0.91)
    assert "-I" in g.flags and "236" in g.flags and "1024" in g.flags


@pytest.mark.parametrize("content, words", [
    ("", "empty"),
    ("hello, this is not perftest\n", "not perftest output"),
    ('{"foo": 1}', "test_info"),
    ('{"test_info": ', "not valid JSON"),
    (LAT_TEXT.split(" #bytes")[0], "no result table"),
])
def test_bad_input_one_line_exit_2(tmp_path: Path, content: str, words: str) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text(content)
    code, out, err = _cli(["calibrate", str(bad), "--base", BASE, "--out",
                           str(tmp_path / "x.yaml")])
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert str(bad) in err and words in err, err
    assert not (tmp_path / "x.yaml").exists()


def test_unknown_base_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "lat.txt").write_text(LAT_TEXT)
    code, _, err = _cli(["calibrate", str(tmp_path / "lat.txt"), "--base", "no-such-nic",
                         "--out", str(tmp_path / "x.yaml")])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no-such-nic" in err
    code, _, err = _cli(["calibrate", str(tmp_path / "nope.txt"), "--base", BASE, "--out",
                         str(tmp_path / "x.yaml")])
    assert code == 2 and "nope.txt" in err and len(err.strip().splitlines()) == 1
    code, _, err = _cli(["calibrate", str(tmp_path / "lat.txt"), "--base", BASE, "--out",
                         str(tmp_path / "x.yaml"), "--params", "nic.no_such"])
    assert code == 2 and "nic.no_such" in err
