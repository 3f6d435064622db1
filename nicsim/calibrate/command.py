"""`nicsim calibrate FILE... --base NAME --out my-nic.yaml`: the report and the profile."""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from nicsim.calibrate.fit import MAX_EVALS, Result, fit, leave_one_out
from nicsim.calibrate.inputs import Figure, InputError, read_inputs
from nicsim.calibrate.model import (
    ITERS,
    PIPELINE,
    CalibrateError,
    Param,
    Simulator,
    base_profile,
    fields,
    params,
)
from nicsim.profiles import PROFILE_DIR, ProfileError, load_profile
from nicsim.usage import UsageError


def calibrate(files: list[str], base: str, names: list[str] | None = None,
              iters: int = ITERS, max_evals: int = MAX_EVALS) -> dict[str, Any]:
    """Read, fit, cross-validate: the whole report as a dict (what --json prints), with the
    Result and the parameters under the keys `_result`, `_params` and `_profile`."""
    return calibrate_figures(read_inputs(files), base, names, iters, max_evals)


def calibrate_figures(figs: list[Figure], base: str, names: list[str] | None = None,
                      iters: int = ITERS, max_evals: int = MAX_EVALS) -> dict[str, Any]:
    """calibrate() on figures already read (or made some other way: a benchmark's table)."""
    if not figs:
        raise CalibrateError("no figures to fit")
    prof = base_profile(base)
    ps, notes = params(prof, names)
    pub = np.array([f.value for f in figs])
    sim = Simulator(prof, ps, figs, iters)
    try:
        res = fit(sim, ps, pub, max_evals)
        leave_one_out(sim, ps, pub, res)
        runs = sim.runs
    finally:
        sim.close()
    return _report(figs, prof, ps, notes, res, iters, runs)


def _pct(r: float | None) -> float | None:
    return None if r is None else math.exp(r) - 1


def _errors(rs: list[float | None]) -> dict[str, Any]:
    e = [abs(math.exp(r) - 1) for r in rs if r is not None]
    if not e:
        return {"figures": 0, "rms": None, "max": None}
    return {"figures": len(e), "rms": float(np.sqrt(np.mean(np.square(e)))),
            "max": float(max(e))}


def _report(figs: list[Figure], prof: Any, ps: list[Param], notes: list[str], res: Result,
            iters: int, runs: int) -> dict[str, Any]:
    figures = []
    for i, f in enumerate(figs):
        loo_r = res.loo_r[i]
        lin = res.loo_linear[i]
        figures.append({
            "file": f.file, "tool": f.tool, "size": f.size, "metric": f.metric,
            "unit": f.unit, "command": f.command(), "published": f.value,
            "simulated": float(res.sim[i]), "ratio": float(res.sim[i] / f.value),
            "loo_simulated": None if loo_r is None else float(f.value * math.exp(loo_r)),
            "loo_ratio": None if loo_r is None else float(math.exp(loo_r)),
            "loo_linear_ratio": None if lin is None else float(math.exp(lin))})
    fitted_names = {ps[j].name for j in res.ident.keep}
    plist = []
    for j, p in enumerate(ps):
        ident = j in res.ident.keep
        v = p.value(float(res.x[j]))
        se = res.stderr[j]
        plist.append({
            "name": p.name, "base": p.base, "value": v if ident else p.base,
            "fitted": ident, "bounds": [p.lo, p.hi],
            "at_bound": bool(ident and (math.isclose(res.x[j], p.x_lo, abs_tol=1e-6)
                                        or math.isclose(res.x[j], p.x_hi, abs_tol=1e-6))),
            "stderr_pct": None if not ident or np.isnan(se) else float(se * 100),
            "why_not": res.ident.why.get(j),
            "sensitive_figures": [i for i in range(len(figs))
                                  if abs(res.jac[i, j]) >= 0.02]})
    fields_set = fields(prof, [ps[j] for j in res.ident.keep], res.x[res.ident.keep])
    return {
        "base": prof.name, "base_path": str(prof.path),
        "inputs": sorted({f.file for f in figs}, key=[f.file for f in figs].index),
        "simulation": {"latency_iters": iters, "bw_iters": iters,
                       "bw_note": "BW figures above 80 KiB run fewer iterations (at least 8; "
                                  "16 MiB per figure), their TX depth capped to them",
                       "perftest_runs": runs},
        "optimizer": {"method": "Levenberg-Marquardt on log(parameter), forward differences, "
                                "bounds by projection", "evaluations": res.evaluations,
                      "iterations": res.iterations, "stop": res.stop},
        "loo_method": "linearized refit around the full fit (Jacobian at the fit, the figure "
                      "left out; parameters only it identified back at the base), each "
                      "prediction then simulated once",
        "parameters": plist, "not_fitted": notes, "fitted": sorted(fitted_names),
        "fields": fields_set, "figures": figures,
        "fit_error": _errors(list(res.r)), "loo_error": _errors(res.loo_r),
        "_result": res, "_params": ps, "_profile": prof}


def _fmt(v: float) -> str:
    return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.0f}"


def text(rep: dict[str, Any], out: str | None) -> str:
    lines = []
    figs = rep["figures"]
    sim = rep["simulation"]
    lines.append(f"nicsim calibrate: {len(figs)} figures from {len(rep['inputs'])} files, "
                 f"base {rep['base']}; simulated with perftest -n {sim['latency_iters']} "
                 f"(BW above 80 KiB: fewer, 16 MiB a figure), {sim['perftest_runs']} runs")
    opt = rep["optimizer"]
    lines.append(f"fit: {opt['evaluations']} evaluations, {opt['iterations']} steps, "
                 f"{opt['stop']}")
    lines.append("")
    lines.append(f"{'parameter':<22} {'base':>10} {'fitted':>10}  {'+/-':>6}  bounds")
    for p in rep["parameters"]:
        if p["fitted"]:
            se = "" if p["stderr_pct"] is None else f"{p['stderr_pct']:.0f}%"
            bound = "  (at its bound)" if p["at_bound"] else ""
            lines.append(f"{p['name']:<22} {_fmt(p['base']):>10} {_fmt(p['value']):>10}  "
                         f"{se:>6}  [{_fmt(p['bounds'][0])}, {_fmt(p['bounds'][1])}]{bound}")
    for p in rep["parameters"]:
        if not p["fitted"]:
            lines.append(f"{p['name']:<22} {_fmt(p['base']):>10} {'(base)':>10}  not "
                         f"identified: {p['why_not']}")
    for n in rep["not_fitted"]:
        lines.append(n)
    if any(p["name"] == PIPELINE and p["fitted"] for p in rep["parameters"]):
        nic = rep["fields"]["nic"]
        lines.append(f"  ({PIPELINE} is tx_pipeline_ns + rx_pipeline_ns, the base's split "
                     f"kept: {nic['tx_pipeline_ns']} + {nic['rx_pipeline_ns']})")
    lines.append("")
    w = max(len(_label(f)) for f in figs)
    lines.append(f"{'figure':<{w}} {'published':>10} {'simulated':>10} {'ratio':>6}   "
                 f"{'LOO sim':>10} {'LOO ratio':>9}")
    for f in figs:
        loo = "" if f["loo_ratio"] is None else f"{f['loo_simulated']:>10.4g} " \
                                                f"{f['loo_ratio']:>9.3f}"
        lines.append(f"{_label(f):<{w}} {f['published']:>10.4g} {f['simulated']:>10.4g} "
                     f"{f['ratio']:>6.3f}   {loo}")
    fe, le = rep["fit_error"], rep["loo_error"]
    lines.append("")
    lines.append(f"fit error: rms {_p(fe['rms'])}, max {_p(fe['max'])} over "
                 f"{fe['figures']} figures")
    lines.append(f"leave-one-out error: rms {_p(le['rms'])}, max {_p(le['max'])} over "
                 f"{le['figures']} figures (each figure predicted by a refit without it: "
                 f"what the profile predicts of what it was not fitted to)")
    if out:
        lines.append(f"wrote {out}: nicsim perftest TOOL ... --profile {out}")
    return "\n".join(lines)


def _p(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _label(f: dict[str, Any]) -> str:
    return f"{Path(f['file']).name}: {f['tool']} {f['size']} B {f['metric']}"


def profile_text(rep: dict[str, Any], base: str, out: Path, argv: list[str]) -> str:
    """The profile: base and the fitted fields, each with its source."""
    figs = rep["figures"]
    fe, le = rep["fit_error"], rep["loo_error"]
    err = (f"fit error rms {_p(fe['rms'])} (max {_p(fe['max'])}), leave-one-out rms "
           f"{_p(le['rms'])} (max {_p(le['max'])}) over {fe['figures']} figures")
    doc: dict[str, Any] = {"name": out.stem, "title": f"{rep['base']} calibrated to "
                           f"{len(figs)} perftest figures (nicsim calibrate)",
                           "base": _base_ref(base, out)}
    for p in rep["parameters"]:
        if not p["fitted"]:
            continue
        used = [figs[i] for i in p["sensitive_figures"]] or figs
        named = "; ".join(f"{Path(f['file']).name}: {f['tool']} {f['size']} B {f['metric']} "
                          f"{f['published']:.4g}" for f in used)
        src = f"nicsim calibrate: fitted to {named}. {err}"
        if p["name"] == PIPELINE:
            nic = rep["fields"]["nic"]
            for fld in ("tx_pipeline_ns", "rx_pipeline_ns"):
                doc.setdefault("nic", {})[fld] = {
                    "value": nic[fld],
                    "source": f"{src}. Fitted as tx_pipeline_ns + rx_pipeline_ns = "
                              f"{p['value']} with the base's split kept"}
        else:
            sec, fld = p["name"].split(".")
            doc.setdefault(sec, {})[fld] = {"value": rep["fields"][sec][fld], "source": src}
    kept = ", ".join(p["name"] for p in rep["parameters"] if not p["fitted"]) or "none"
    head = (f"# Written by: nicsim calibrate {' '.join(shlex.quote(a) for a in argv)}\n"
            f"# Only the fitted values are here; everything else is {rep['base']}'s. Not "
            f"fitted: {kept}.\n")
    return head + yaml.safe_dump(doc, sort_keys=False, width=1 << 16)


def _base_ref(base: str, out: Path) -> str:
    """A shipped profile by name; a file by its path from the output's directory (a
    profile's base path is taken relative to the profile)."""
    if (PROFILE_DIR / f"{base}.yaml").is_file() and "/" not in base:
        return base
    return os.path.relpath(Path(base).resolve(), out.resolve().parent)


def main(args: Any) -> int:
    out = Path(args.out)
    if out.suffix not in (".yaml", ".yml"):
        raise UsageError(f"--out {out}: a .yaml file (nicsim perftest --profile takes it)")
    if not out.resolve().parent.is_dir():
        raise UsageError(f"--out {out}: directory {out.parent} does not exist")
    names = None
    if args.params:
        names = [n.strip() for n in args.params.split(",") if n.strip()]
    if args.iters < 5:
        raise UsageError("--iters: at least 5 (perftest's minimum)")
    if args.max_evals < 1:
        raise UsageError("--max-evals: at least 1")
    try:
        base_profile(args.base)  # (a bad --base fails before the inputs are simulated)
        rep = calibrate(args.files, args.base, names, args.iters, args.max_evals)
    except (InputError, CalibrateError) as e:
        raise UsageError(str(e)) from None
    argv = [*args.files, "--base", args.base, "--out", str(out)]
    text_out = profile_text(rep, args.base, out, argv)
    try:
        out.write_text(text_out, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"--out {out}: {e.strerror or e}") from None
    try:
        load_profile(str(out))  # what perftest --profile and run --profile will do with it
    except ProfileError as e:  # (a bug here, not the user's input: said, not hidden)
        raise UsageError(f"the written profile does not load: {e}") from None
    if args.json:
        doc = {k: v for k, v in rep.items() if not k.startswith("_")}
        doc["out"] = str(out)
        print(json.dumps(doc, indent=2))
    else:
        print(text(rep, str(out)))
    sys.stdout.flush()
    return 0
