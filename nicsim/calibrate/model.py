"""The free parameters and the simulated figures: nicsim's perftest model run in-process
(nicsim.apps.perftest) under the base profile with the parameters changed.

A parameter is a profile field (`section.field`), or `nic.pipeline_ns`, the sum of
nic.tx_pipeline_ns and nic.rx_pipeline_ns with the base's split between them kept: the
latencies see the two only as a sum (a request crosses one NIC's transmit and the other's
receive pipeline), so only the sum can be fitted. The optimizer works on the logarithm of
each value (a relative step means the same at 20 ns and at 2000 ns); integer fields (cycle
counts) are rounded when a trial profile is written.
"""

from __future__ import annotations

import hashlib
import io
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from nicsim.apps.perftest import run
from nicsim.apps.perftest.params import PerftestError, TestKind, parse
from nicsim.calibrate.inputs import Figure
from nicsim.profiles import SECTIONS, Profile, ProfileError, load_profile

PIPELINE = "nic.pipeline_ns"
# The parameters fitted unless --params says otherwise, with their bounds. Each is one a
# shipped profile fits to published figures (see their `source:`): the PCIe latency and the
# NIC pipelines (small-message latency), the per-WQE cost (one QP's message rate); the CPU's
# post and poll costs only where the base profile sets them (a profile without a cpu section
# has the model's defaults, which no shipped profile fits).
DEFAULT_PARAMS = ("pcie.latency_ns", PIPELINE, "nic.wqe_parse_cycles", "cpu.post_send_ns",
                  "cpu.poll_cqe_ns")
CPU_IF_SET = ("cpu.post_send_ns", "cpu.poll_cqe_ns")
_BOUNDS = {"pcie.latency_ns": (10.0, 5000.0), PIPELINE: (10.0, 20000.0),
           "nic.wqe_parse_cycles": (1.0, 100000.0), "cpu.post_send_ns": (5.0, 20000.0),
           "cpu.poll_cqe_ns": (5.0, 20000.0)}
# Iterations of the simulated runs: the model is deterministic at the shipped profiles'
# cpu.spread 0, so a few hundred exchanges give the figure a long run would (a BW run's
# ramp is one TX depth of a few hundred). Large BW messages run fewer (at least 8), so no
# figure moves more than BW_BYTES through the simulation per evaluation.
ITERS = 200
BW_BYTES = 16 << 20


class CalibrateError(ValueError):
    """Bad input to the fit (a base, a parameter, a figure the model cannot run): one line."""


@dataclass(frozen=True)
class Param:
    name: str  # section.field, or nic.pipeline_ns
    base: float  # the base profile's value
    lo: float
    hi: float
    integer: bool

    @property
    def x_lo(self) -> float:
        return math.log(self.lo)

    @property
    def x_hi(self) -> float:
        return math.log(self.hi)

    @property
    def x_base(self) -> float:
        return math.log(min(max(self.base, self.lo), self.hi))

    def value(self, x: float) -> float | int:
        v = math.exp(x)
        return int(round(v)) if self.integer else round(v, 3)


def base_profile(base: str) -> Profile:
    try:
        return load_profile(base)
    except ProfileError as e:
        raise CalibrateError(f"--base: {e}") from None


def params(prof: Profile, names: list[str] | None) -> tuple[list[Param], list[str]]:
    """The parameters to fit (`names`, or the default set) and notes on the defaults left
    out (the CPU costs of a base without them)."""
    values = prof.values()
    notes: list[str] = []
    if names is None:
        names = []
        for n in DEFAULT_PARAMS:
            sec, fld = n.split(".")
            if n in CPU_IF_SET and fld not in prof.sections.get(sec, {}):
                notes.append(f"{n}: not fitted (the base profile does not set it: the "
                             f"model's default {values[sec][fld]} kept)")
                continue
            names.append(n)
    out = []
    for n in names:
        if n == PIPELINE:
            base = float(values["nic"]["tx_pipeline_ns"] + values["nic"]["rx_pipeline_ns"])
            integer = False
        else:
            sec, _, fld = n.partition(".")
            if sec not in SECTIONS or fld not in values.get(sec, {}):
                raise CalibrateError(f"--params: {n}: not a profile field (section.field, "
                                     f"e.g. pcie.latency_ns, or {PIPELINE})")
            v = values[sec][fld]
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise CalibrateError(f"--params: {n}: not a number ({v!r})")
            base, integer = float(v), isinstance(v, int)
        lo, hi = _BOUNDS.get(n, (max(base / 20, 1e-3), max(base * 20, 1.0)))
        if n != PIPELINE:
            lo, hi = _within_schema(n, lo, hi)
        out.append(Param(n, base, lo, hi, integer))
    if len({p.name for p in out}) != len(out):
        raise CalibrateError("--params: a parameter is named twice")
    return out, notes


def _within_schema(name: str, lo: float, hi: float) -> tuple[float, float]:
    """Bounds narrowed to what the profile schema accepts for the field (a trial profile
    outside them would not load)."""
    from nicsim.profiles.profile import _model

    sec, fld = name.split(".")
    for m in _model(sec).model_fields[fld].metadata:
        for attr, tighter in (("ge", max), ("gt", max), ("le", min), ("lt", min)):
            bound = getattr(m, attr, None)
            if bound is not None:
                nudge = 1e-6 if attr == "gt" else -1e-6 if attr == "lt" else 0.0
                if tighter is max:
                    lo = max(lo, float(bound) + nudge)
                else:
                    hi = min(hi, float(bound) + nudge)
    lo = max(lo, 1e-3)  # (the optimizer works on logarithms)
    return lo, max(hi, lo)


def fields(prof: Profile, ps: list[Param], x: np.ndarray) -> dict[str, dict[str, Any]]:
    """The profile fields a point sets, by section."""
    out: dict[str, dict[str, Any]] = {}
    nic = prof.values()["nic"]
    for p, xi in zip(ps, x, strict=True):
        v = p.value(float(xi))
        if p.name == PIPELINE:
            tx, rx = nic["tx_pipeline_ns"], nic["rx_pipeline_ns"]
            share = tx / (tx + rx) if tx + rx > 0 else 0.5
            out.setdefault("nic", {}).update(tx_pipeline_ns=round(v * share, 3),
                                              rx_pipeline_ns=round(v * (1 - share), 3))
        else:
            sec, fld = p.name.split(".")
            out.setdefault(sec, {})[fld] = v
    return out


def sim_iters(f: Figure, iters: int) -> int:
    if f.kind is TestKind.BW:
        return max(8, min(iters, BW_BYTES // max(f.size, 1)))
    return iters


class Simulator:
    """Simulates the figures at a point (a vector of log values of the parameters): one
    trial profile per point (base: the base profile, the point's fields), one perftest run
    per figure. Results are kept by the point's profile fields (rounded), so a point the
    optimizer revisits costs nothing."""

    def __init__(self, prof: Profile, ps: list[Param], figures: list[Figure],
                 iters: int = ITERS) -> None:
        self.prof = prof
        self.ps = ps
        self.figures = figures
        self.iters = iters
        self._dir = tempfile.TemporaryDirectory(prefix="nicsim-calibrate-")
        self._cache: dict[tuple[str, int], float] = {}
        self.runs = 0  # perftest runs made

    def close(self) -> None:
        self._dir.cleanup()

    def _profile(self, x: np.ndarray) -> tuple[str, str]:
        f = fields(self.prof, self.ps, x)
        key = yaml.safe_dump(f, sort_keys=True)
        path = Path(self._dir.name) / f"trial-{hashlib.sha1(key.encode()).hexdigest()[:16]}.yaml"
        if not path.exists():
            doc = {"name": "calibrate-trial", "title": "nicsim calibrate: a trial point",
                   "base": str(self.prof.path.resolve()), **f}
            path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return key, str(path)

    def one(self, x: np.ndarray, i: int) -> float:
        key, path = self._profile(x)
        if (key, i) not in self._cache:
            self._cache[(key, i)] = simulate(self.figures[i], path, self.iters)
            self.runs += 1
        return self._cache[(key, i)]

    def all(self, x: np.ndarray, rows: list[int] | None = None) -> np.ndarray:
        idx = range(len(self.figures)) if rows is None else rows
        return np.array([self.one(x, i) for i in idx])


def simulate(f: Figure, profile: str, iters: int) -> float:
    """The figure's metric from one run of nicsim's perftest model under `profile`."""
    argv = [*f.flags, "-s", str(f.size), "-n", str(sim_iters(f, iters)), "--profile",
            profile]
    try:
        p = parse(f.tool, argv)
        res = run(p, io.StringIO(), io.StringIO())
    except PerftestError as e:
        raise CalibrateError(f"{f.label}: the model cannot run {f.command()}: "
                             f"{' '.join(ln.strip() for ln in e.lines if ln.strip())}") from None
    r = res["results"][-1]
    if f.metric == "bw_gbps":
        unit = 1.0 if p.report_gbits else 0x100000 * 8 / 1e9
        return float(r.bw_avg) * unit
    if f.metric == "msg_rate_mpps":
        return float(r.msg_rate)
    if f.metric == "t_typical_us":
        return float(r.t_typical)
    return float(r.t_avg)
