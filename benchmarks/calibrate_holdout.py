"""`nicsim calibrate` on published figures: fit on half of a hardware's check rows of
benchmarks/fidelity_figures.yaml, predict the other half.

A group is the check rows that share one profile and one host (the same NIC, PCIe slot and
CPU): `cx4` is D. Potter's ConnectX-4 EDR host (five ib_send_lat rows, RC and UD, 1-32 KiB),
`mark1` the ConnectX-5 in a PCIe x8 slot of the Mark 1 lab (two 8 B latencies, three 1 MiB
bandwidths). The rows are taken in table order and alternate: the 1st, 3rd, ... are fitted
(as `nicsim calibrate` would fit them, from the group's profile as the base), the 2nd, 4th,
... are predicted by the written profile, which no fitted value saw. Reported: the fit's
figures, the leave-one-out error within the fitted half, and the hold-out error, the one that
is evidence. Every number comes from the simulation (perftest -n 200, fewer for large BW
messages, as nicsim calibrate runs them); nothing is measured on the machine running it.

    python benchmarks/calibrate_holdout.py [--group cx4|mark1|all] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from nicsim.calibrate.command import calibrate_figures, profile_text
from nicsim.calibrate.inputs import Figure
from nicsim.calibrate.model import ITERS, simulate

TABLE = Path(__file__).with_name("fidelity_figures.yaml")
# The check rows of each group: one host's (the source says which measurement it is)
GROUPS = {"cx4": lambda r: r["id"].startswith("cx4-") and "Potter" in str(r["source"]),
          "mark1": lambda r: r["id"].startswith("cx5-mark1-")}


def figure(row: dict[str, Any]) -> Figure:
    args = [str(a) for a in row["args"]]
    flags, skip = [], False
    for i, a in enumerate(args):  # -s and -n are the figure's size and the simulation's own
        if skip:
            skip = False
        elif a in ("-s", "-n"):
            skip = True
        elif a != "--report_gbits":
            flags.append(args[i])
    return Figure(f"fidelity_figures.yaml#{row['id']}", row["tool"], flags, int(row["size"]),
                  row["metric"], float(row["value"]), 0)


def holdout(group: str, iters: int) -> dict[str, Any]:
    table = yaml.safe_load(TABLE.read_text())
    rows = [r for r in table["figures"]
            if r["use"] == "check" and GROUPS[group](r)]
    profiles = {r["profile"] for r in rows}
    assert len(profiles) == 1, profiles
    base = profiles.pop()
    fit_rows, held = rows[::2], rows[1::2]
    rep = calibrate_figures([figure(r) for r in fit_rows], base, iters=iters)
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / f"holdout-{group}.yaml"
        out.write_text(profile_text(rep, base, out, ["(benchmarks/calibrate_holdout.py)"]))
        predicted = []
        for r in held:
            f = figure(r)
            sim_fit = simulate(f, str(out), iters)
            sim_base = simulate(f, base, iters)
            predicted.append({"id": r["id"], "command": f.command(), "metric": f.metric,
                              "published": f.value, "predicted": sim_fit,
                              "ratio": sim_fit / f.value, "base_predicted": sim_base,
                              "base_ratio": sim_base / f.value})
    errs = [abs(p["ratio"] - 1) for p in predicted]
    base_errs = [abs(p["base_ratio"] - 1) for p in predicted]
    return {
        "group": group, "base": base, "fitted_rows": [r["id"] for r in fit_rows],
        "held_out_rows": [r["id"] for r in held],
        "parameters": [{k: p[k] for k in ("name", "base", "value", "fitted", "why_not")}
                       for p in rep["parameters"]],
        "fit": [{"id": r["id"], "published": f["published"], "simulated": f["simulated"],
                 "ratio": f["ratio"], "loo_ratio": f["loo_ratio"]}
                for r, f in zip(fit_rows, rep["figures"], strict=True)],
        "fit_error": rep["fit_error"], "loo_error": rep["loo_error"],
        "held_out": predicted,
        "held_out_error": {"rms": _rms(errs), "max": max(errs) if errs else None},
        "held_out_error_of_base": {"rms": _rms(base_errs),
                                   "max": max(base_errs) if base_errs else None},
        "optimizer": rep["optimizer"]}


def _rms(e: list[float]) -> float | None:
    return math.sqrt(sum(x * x for x in e) / len(e)) if e else None


def _p(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def print_text(res: dict[str, Any]) -> None:
    print(f"group {res['group']} (base {res['base']}): fit on {len(res['fitted_rows'])} "
          f"check rows, predict {len(res['held_out_rows'])}")
    for p in res["parameters"]:
        state = f"{p['base']:g} -> {p['value']:g}" if p["fitted"] else \
            f"{p['base']:g} (not identified: {p['why_not']})"
        print(f"  {p['name']:<22} {state}")
    print(f"  {'row':<28} {'published':>10} {'simulated':>10} {'ratio':>6} {'LOO':>6}")
    for f in res["fit"]:
        loo = "" if f["loo_ratio"] is None else f"{f['loo_ratio']:>6.3f}"
        print(f"  fit  {f['id']:<23} {f['published']:>10.4g} {f['simulated']:>10.4g} "
              f"{f['ratio']:>6.3f} {loo}")
    for f in res["held_out"]:
        print(f"  held {f['id']:<23} {f['published']:>10.4g} {f['predicted']:>10.4g} "
              f"{f['ratio']:>6.3f}  (base profile: {f['base_ratio']:.3f})")
    print(f"  fit error rms {_p(res['fit_error']['rms'])}; leave-one-out rms "
          f"{_p(res['loo_error']['rms'])}; held-out rms {_p(res['held_out_error']['rms'])} "
          f"max {_p(res['held_out_error']['max'])} (base profile: rms "
          f"{_p(res['held_out_error_of_base']['rms'])})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--group", choices=[*GROUPS, "all"], default="cx4")
    ap.add_argument("--iters", type=int, default=ITERS, help="perftest -n of each simulation")
    ap.add_argument("--json", action="store_true", help="print JSON only")
    args = ap.parse_args()
    groups = list(GROUPS) if args.group == "all" else [args.group]
    results = [holdout(g, args.iters) for g in groups]
    if args.json:
        print(json.dumps({"groups": results}, indent=2))
    else:
        for r in results:
            print_text(r)
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
