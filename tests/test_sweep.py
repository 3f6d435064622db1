"""`nicsim sweep`: points from a cross product or zip with seeds, one result directory each,
a combined CSV and report, resume, a failing point reported while the others go on, and the
same sweep through a Dask scheduler (a distributed.LocalCluster: the dask extra is part of
`make test`'s install)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from nicsim.cli import main
from nicsim.scenario.schema import ScenarioError
from nicsim.sweep.spec import load_sweep

BASE = "name: base\npcap: null\nstreams:\n  - {op: write, bytes: 4096, depth: 4, count: 40}\n"


def setup(tmp_path: Path, sweep: str) -> Path:
    (tmp_path / "base.yaml").write_text(BASE)
    p = tmp_path / "sw.yaml"
    p.write_text(sweep)
    return p


def points(out: Path) -> list[dict[str, str]]:
    with (out / "points.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_cross_product_zip_and_seeds(tmp_path):
    p = setup(tmp_path, "scenario: base.yaml\nparameters:\n  streams[0].bytes: [1024, 4096]\n"
                        "  link.rate_gbps: [25, 50, 100]\nseeds: 2\n")
    sw = load_sweep(p)
    assert len(sw.points) == 2 * 3 * 2
    assert sw.points[0].overrides({}) == ["streams[0].bytes=1024", "link.rate_gbps=25",
                                          "seed=1"]
    assert len({pt.dirname for pt in sw.points}) == 12
    p.write_text("scenario: base.yaml\nmode: zip\nparameters:\n  streams[0].bytes: [1024, "
                 "4096]\n  link.rate_gbps: [25, 50]\nseeds: [7]\n")
    assert [pt.params for pt in load_sweep(p).points] == [
        (("streams[0].bytes", 1024), ("link.rate_gbps", 25)),
        (("streams[0].bytes", 4096), ("link.rate_gbps", 50))]
    p.write_text("scenario: base.yaml\nmode: zip\nparameters:\n  a: [1, 2]\n  b: [1]\n")
    with pytest.raises(ScenarioError, match="zip needs parameter lists of one length"):
        load_sweep(p)


def test_local_sweep_resumes_and_reports_a_failing_point(tmp_path, capsys):
    """Four points on two processes; one fails (a size the schema refuses) and the others
    go on; a second run skips the finished points, and re-runs one whose directory lost its
    completion mark."""
    p = setup(tmp_path, "scenario: base.yaml\nparameters:\n"
                        "  streams[0].bytes: [1024, 4096, 2000000000]\n  link.rate_gbps: [25]\n"
                        "set:\n  streams[0].count: 20\n")
    out = tmp_path / "out"
    assert main(["sweep", str(p), "--out", str(out), "--workers", "2"]) == 1
    cap = capsys.readouterr()
    rows = points(out)
    assert [r["status"] for r in rows] == ["ok", "ok", "failed"]
    assert "streams[0].bytes: Input should be less than or equal to 1073741824" in \
        rows[2]["error"]
    assert "002-bytes=2000000000-rate_gbps=25: failed" in cap.out
    for r in rows[:2]:
        d = out / r["dir"]
        assert (d / "report.html").is_file() and (d / "flows.csv").is_file()
        s = json.loads((d / "summary.json").read_text())
        assert s["configuration"]["streams"][0]["count"] == 20  # the fixed `set`
        assert float(r["goodput_total_gbps"]) == pytest.approx(s["goodput"][0]["gbps"])
    g1, g4 = (float(r["goodput_total_gbps"]) for r in rows[:2])
    assert g1 < g4 < 25  # a 25 Gb/s link, bigger messages go faster
    assert (out / "report.html").is_file() and (out / "goodput_max_direction_gbps.png").is_file()
    mark = out / rows[0]["dir"] / "done.json"
    before = mark.stat().st_mtime_ns
    (out / rows[1]["dir"] / "done.json").unlink()
    assert main(["sweep", str(p), "--out", str(out), "--workers", "2"]) == 1
    err = capsys.readouterr().err
    assert f"{rows[0]['dir']}: ok (finished before)" in err
    assert f"{rows[1]['dir']}: ok," in err  # run again
    assert "failed: ScenarioError" in err  # a failed point is tried again
    assert mark.stat().st_mtime_ns == before


def test_sweep_on_a_dask_cluster(tmp_path):
    try:
        from distributed import LocalCluster
    except ImportError:
        pytest.fail("the dask extra is not installed: pip install -e '.[test,hdl,dask]' "
                    "(make test does)")
    p = setup(tmp_path, "scenario: base.yaml\nparameters:\n  link.rate_gbps: [25, 100]\n"
                        "seeds: [1, 2]\n")
    out = tmp_path / "out"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster:
        assert main(["sweep", str(p), "--out", str(out), "--dask",
                     cluster.scheduler_address, "--quiet"]) == 0
    rows = points(out)
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    assert [r["seed"] for r in rows] == ["1", "2", "1", "2"]
    assert all((out / r["dir"] / "summary.json").is_file() for r in rows)


def test_a_changed_fixed_set_reruns_the_points_instead_of_resuming_stale_ones(tmp_path, capsys):
    """A point's identity is its whole resolved scenario (and the code): the same directory
    name with another `set:` is another point (it resumed the old results: depth 1 -> 4 gave
    the depth-1 goodput again)."""
    p = setup(tmp_path, "scenario: base.yaml\nparameters:\n  streams[0].bytes: [4096]\n"
                        "set:\n  streams[0].depth: 1\n")
    out = tmp_path / "out"
    assert main(["sweep", str(p), "--out", str(out), "--workers", "1"]) == 0
    g1 = float(points(out)[0]["goodput_total_gbps"])
    p.write_text("scenario: base.yaml\nparameters:\n  streams[0].bytes: [4096]\n"
                 "set:\n  streams[0].depth: 4\n")
    capsys.readouterr()
    assert main(["sweep", str(p), "--out", str(out), "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert "finished before" not in err
    g4 = float(points(out)[0]["goodput_total_gbps"])
    assert g4 > g1  # deeper queue, more goodput: the new point's figure
    assert main(["sweep", str(p), "--out", str(out), "--workers", "1"]) == 0
    assert "ok (finished before)" in capsys.readouterr().err  # unchanged: resumed


def test_set_on_the_command_line_and_seeds_with_their_interval(tmp_path, capsys):
    """`sweep --set` shrinks a sweep without editing it; with seeds, each point's plotted
    figures come with their mean and 95% interval over the seeds; goodput is named for
    what it is: the busiest direction, and the total over directions."""
    p = setup(tmp_path, "scenario: base.yaml\nparameters:\n  streams[0].bytes: [1024, 4096]\n"
                        "seeds: 3\n")
    out = tmp_path / "out"
    assert main(["sweep", str(p), "--out", str(out), "--workers", "2",
                 "--set", "streams[0].count=8"]) == 0
    rows = points(out)
    assert len(rows) == 6
    for r in rows:
        s = json.loads((out / r["dir"] / "summary.json").read_text())
        assert s["configuration"]["streams"][0]["count"] == 8  # the --set
        assert float(r["goodput_max_direction_gbps"]) <= float(r["goodput_total_gbps"]) + 1e-9
    for size in ("1024", "4096"):
        group = [r for r in rows if r["streams[0].bytes"] == size]
        vals = [float(r["goodput_max_direction_gbps"]) for r in group]
        mean = sum(vals) / 3
        assert all(float(r["goodput_max_direction_gbps_mean"]) == pytest.approx(mean)
                   for r in group)
        ci = float(group[0]["goodput_max_direction_gbps_ci95"])
        sd = (sum((v - mean) ** 2 for v in vals) / 2) ** 0.5
        assert ci == pytest.approx(4.303 * sd / 3 ** 0.5)  # t(0.975, 2 dof)
    assert main(["sweep", str(p), "--out", str(out), "--set", "nonsense"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
