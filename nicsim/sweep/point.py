"""One point of a sweep: the base scenario with the point's overrides, run into its own
directory. A plain function of plain data, so a local process or a Dask worker can run it;
whatever goes wrong comes back in the row (the sweep reports it and goes on)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import time
import traceback
from pathlib import Path
from typing import Any

DONE = "done.json"  # written last: a point directory with it is finished (resume skips it)

# The figures of each point that go into the sweep's combined CSV.
METRICS = ("goodput_total_gbps", "goodput_max_direction_gbps", "latency_p50_us",
           "latency_p99_us", "slowdown_p50", "slowdown_p99", "small_slowdown_p99", "wrs",
           "errors", "outstanding")


def metrics(s: dict[str, Any]) -> dict[str, Any]:
    """A point's headline figures from its summary.json."""
    gp = [g["gbps"] for g in s["goodput"] if g["gbps"] is not None]
    fct = s["fct_slowdown"]
    groups = s["groups"]
    sd = [g["slowdown"] for g in groups if g["slowdown"]["count"]]
    # The weighted medians of the groups are not a median of all: the whole run's figures
    # come from the group with the most WRs when there are several.
    main = max(sd, key=lambda q: q["count"]) if sd else None
    small = fct[0] if fct and fct[0]["max_bytes"] and fct[0]["max_bytes"] <= 100_000 else None
    return {
        # Summed over every direction (src -> dst) it can exceed one link's rate; the
        # busiest direction is what one link carried.
        "goodput_total_gbps": sum(gp) if gp else None,
        "goodput_max_direction_gbps": max(gp) if gp else None,
        "latency_p50_us": s["latency_us"]["p50"],
        "latency_p99_us": s["latency_us"]["p99"],
        "slowdown_p50": main["p50"] if main else None,
        "slowdown_p99": main["p99"] if main else None,
        "small_slowdown_p99": small["p99"] if small else None,
        "wrs": s["wrs"]["total"],
        "errors": s["wrs"]["errors"],
        "outstanding": s["wrs"]["outstanding"],
    }


def identity(base: str, overrides: list[str], pcap: bool) -> str:
    """What decides a point's result: the whole scenario as resolved (base, its profile and
    every override, validated) and the code that runs it. A finished point whose identity
    differs is run again, however its directory is named."""
    from nicsim.scenario.load import load
    from nicsim.scenario.schema import ScenarioError

    try:
        sc, _ = load(base, [(f"--set {o}", o) for o in overrides])
    except ScenarioError:
        return ""  # (no identity: it is run, and fails saying why)
    h = hashlib.sha256(sc.model_dump_json().encode())
    h.update(f"pcap={pcap};code={code_identity()}".encode())
    return h.hexdigest()[:32]


@functools.cache
def code_identity() -> str:
    """A hash of nicsim's own files (the model, the driver, their data): a result made by
    other code is another result."""
    import nicsim.driver

    h = hashlib.sha256()
    # (this module's own path, as nicsim.exec.native: a nicsim directory in the working
    # directory is not the package)
    for root in (Path(__file__).resolve().parents[1], Path(nicsim.driver.__file__).parent):
        for f in sorted(root.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:32]


def run_point(base: str, overrides: list[str], out: str, pcap: bool,
              row: dict[str, Any]) -> dict[str, Any]:
    """Run one point into `out` (cleared first: an unfinished earlier attempt leaves no
    files behind); returns `row` with the point's status and metrics."""
    from nicsim.checks import physics
    from nicsim.results import output
    from nicsim.scenario.load import load
    from nicsim.scenario.runner import Runner

    physics.enabled_by_environment()  # (sweep --check: a violation fails the point)
    t = time.perf_counter()
    d = Path(out)
    row = dict(row)
    try:
        if d.exists():
            shutil.rmtree(d)
        d.mkdir()
        row["identity"] = identity(base, overrides, pcap)
        sc, _ = load(base, [(f"--set {o}", o) for o in overrides])
        if not pcap:
            sc = sc.model_copy(update={"pcap": None})
        r = Runner(sc, str(d / f"{sc.name}.pcap") if sc.pcap else None, d, None,
                   Path(base).resolve().parent)
        result = r.run()
        result.files = output.write(result, d)
        s = json.loads((d / "summary.json").read_text())
        row.update(status="ok" if result.ok else "not ok", stop=result.stop_reason,
                   error="", **metrics(s))
    except Exception as e:  # noqa: BLE001 - a point's failure is data for the sweep
        row.update(status="failed", stop="", error=f"{type(e).__name__}: {e}".splitlines()[0])
        if os.environ.get("NICSIM_SWEEP_TRACEBACK"):
            row["traceback"] = traceback.format_exc()
    row["wall_s"] = round(time.perf_counter() - t, 3)
    if d.is_dir():
        tmp = d / (DONE + ".tmp")
        tmp.write_text(json.dumps(row, indent=2) + "\n")
        tmp.replace(d / DONE)
    return row
