"""`nicsim sweep SWEEP.yaml [--out DIR] [--workers N | --dask ADDRESS] [--quiet]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

DEFAULT_DIR = "sweeps"  # results go to sweeps/<name> unless --out says otherwise


def sweep_main(args: argparse.Namespace) -> int:
    from nicsim.results.output import OutputError, prepare
    from nicsim.scenario.schema import ScenarioError
    from nicsim.sweep import combine
    from nicsim.sweep.run import Interrupted, run
    from nicsim.sweep.spec import load_sweep
    from nicsim.usage import UsageError

    sw = load_sweep(args.sweep)
    for item in args.set or []:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"sweep --set {item!r}: KEY=VALUE")
        sw.spec.set[key.strip()] = yaml.safe_load(value)
    if not sw.base.is_file():
        raise ScenarioError(f"{args.sweep}: scenario: no file {sw.base}")
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers: at least 1")
    if args.workers is not None and args.dask:
        raise UsageError("--workers and --dask: give one")
    if args.out:
        out = Path(args.out)
    else:
        Path(DEFAULT_DIR).mkdir(exist_ok=True)
        out = Path(DEFAULT_DIR) / sw.name
    try:
        prepare(out)
    except OutputError as e:
        raise UsageError(str(e).replace("--out", "sweep --out")) from None
    # Check the base scenario with the first point's overrides before starting anything.
    from nicsim.scenario.load import load

    try:
        load(str(sw.base), [(f"--set {o}", o) for o in sw.points[0].overrides(sw.spec.set)])
    except ScenarioError as e:
        raise ScenarioError(f"{args.sweep}: {e}") from None

    def report(row: dict[str, Any], i: int, n: int) -> None:
        if args.quiet:
            return
        what = row.get("status", "?")
        if row.get("resumed"):
            what += " (finished before)"
        elif row.get("error"):
            what += f": {row['error']}"
        print(f"[{i}/{n}] {row['dir']}: {what}" +
              (f", {row['wall_s']:.1f} s" if "wall_s" in row and not row.get("resumed") else ""),
              file=sys.stderr, flush=True)

    try:
        rows = run(sw, out, args.workers, args.dask, report)
    except RuntimeError as e:
        raise UsageError(str(e)) from None
    except Interrupted as stop:
        # Ctrl-C: what finished is kept; a rerun resumes the rest.
        files = combine.write(sw, out, stop.rows) if stop.rows else []
        print(f"sweep {sw.name}: interrupted after {len(stop.rows)} of {len(sw.points)} "
              f"points" + (f"; results so far: {out}/ ({', '.join(files)})" if files else ""),
              file=sys.stderr)
        raise
    files = combine.write(sw, out, rows)
    bad = [r for r in rows if r.get("status") != "ok"]
    print(f"sweep {sw.name}: {len(rows)} points, {len(rows) - len(bad)} ok"
          + (f", {len(bad)} not ok or failed" if bad else "")
          + f"; results: {out}/ ({', '.join(files)})")
    for r in bad:
        print(f"  {r['dir']}: {r.get('status')}" + (f": {r['error']}" if r.get("error") else
                                                    f" (stop: {r.get('stop')})"))
    return 0 if not bad else 1
