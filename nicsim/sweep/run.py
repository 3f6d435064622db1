"""Running a sweep's points: local processes (every core by default, standard library only)
or a Dask distributed scheduler. Finished points are skipped (resume); a point that fails is
reported with its error and the others go on.

With Dask, the workers write each point's directory themselves: the sweep's directory and
the scenario files must be on a file system the workers share (true of a LocalCluster and of
the usual cluster with a shared home or scratch).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from nicsim.sweep.point import DONE, identity, run_point
from nicsim.sweep.spec import Point, Sweep, row_params

Job = tuple[str, list[str], str, bool, dict[str, Any]]


def finished(d: Path, ident: str) -> dict[str, Any] | None:
    """The row of a point that ran to the end before (ok or not) as the same point (its
    identity: the resolved scenario and the code); None to run it (again)."""
    try:
        row = json.loads((d / DONE).read_text())
    except (OSError, ValueError):
        return None
    if row.get("identity") != ident:
        return None  # another scenario or other code made it: stale
    return row if row.get("status") in ("ok", "not ok") else None


def jobs(sw: Sweep, out: Path) -> tuple[list[dict[str, Any]], list[Job]]:
    """Rows of points already finished, and the jobs of those to run."""
    done, todo = [], []
    for pt in sw.points:
        d = out / pt.dirname
        row = finished(d, identity(str(sw.base), pt.overrides(sw.spec.set), sw.spec.pcap))
        if row is not None:
            row["resumed"] = True
            done.append(row)
            continue
        todo.append((str(sw.base), pt.overrides(sw.spec.set), str(d), sw.spec.pcap,
                     _row(pt)))
    return done, todo


def _row(pt: Point) -> dict[str, Any]:
    return {"point": pt.index, "dir": pt.dirname, **row_params(pt)}


def run_local(todo: list[Job], workers: int | None) -> Iterator[dict[str, Any]]:
    """Rows as points finish, `workers` processes at a time (every core by default)."""
    n = workers or os.cpu_count() or 1
    if not todo:
        return
    ex = ProcessPoolExecutor(max_workers=min(n, len(todo)), initializer=_leave_sigint)
    try:
        pending: dict[Future, Job] = {ex.submit(run_point, *j): j for j in todo}
        while pending:
            ready, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in ready:
                job = pending.pop(f)
                yield _result(f, job)
    except BaseException:
        # Ctrl-C (or the caller stopped listening): stop the points running now, at once
        # (the executor would let them finish; its processes are the only handle on them).
        for proc in list(getattr(ex, "_processes", {}).values()):
            proc.terminate()
        ex.shutdown(wait=False, cancel_futures=True)
        raise
    ex.shutdown()


def _leave_sigint() -> None:
    """A worker leaves Ctrl-C to the sweep, which stops it (no traceback per worker)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_dask(todo: list[Job], address: str) -> Iterator[dict[str, Any]]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise RuntimeError("--dask needs the dask extra: pip install 'nicsim[dask]'") from None
    if not todo:
        return
    with Client(address, timeout="10s") as client:
        futures = {client.submit(run_point, *j, pure=False): j for j in todo}
        for f in as_completed(futures):
            yield _result(f, futures[f])


def _result(f: Any, job: Job) -> dict[str, Any]:
    """The row of a finished job; a worker that died (or any error outside run_point's own
    handling) is a failed point, not a failed sweep."""
    try:
        return f.result()
    except Exception as e:  # noqa: BLE001
        row = dict(job[4])
        row.update(status="failed", error=f"{type(e).__name__}: {e}".splitlines()[0])
        return row


def run(sw: Sweep, out: Path, workers: int | None, dask: str | None,
        report: Callable[[dict[str, Any], int, int], None]) -> list[dict[str, Any]]:
    rows, todo = jobs(sw, out)
    total = len(sw.points)
    for i, r in enumerate(rows, 1):
        report(r, i, total)
    gen = run_dask(todo, dask) if dask else run_local(todo, workers)
    try:
        for r in gen:
            rows.append(r)
            report(r, len(rows), total)
    except KeyboardInterrupt:
        raise Interrupted(sorted(rows, key=lambda r: r["point"])) from None
    return sorted(rows, key=lambda r: r["point"])


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep: the rows of the points finished so far."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        super().__init__()
        self.rows = rows
