"""How close nicsim's profiles come to published perftest figures.

For every row of benchmarks/fidelity_figures.yaml (a published figure: tool, flags, metric,
NIC, link, size, source) this runs the same `nicsim perftest` command under the row's
profile and prints the simulated value and the ratio simulated / published, and whether it
is within the target (10%). Shape claims (one profile ahead of another at every size) are
checked over a sweep of sizes; --plot writes the iRDMA-vs-ConnectX-4 Lx ib_write_bw curve.

    python benchmarks/fidelity.py [--json] [--only ID] [--iters N] [--plot DIR]

The model helper calibrates profiles with this: every number comes from the simulation
(nicsim.apps.perftest), nothing is measured on the machine running it.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from nicsim.apps.perftest import run
from nicsim.apps.perftest.params import Params, PerftestError, TestKind, parse

TABLE = Path(__file__).with_name("fidelity_figures.yaml")
TARGET = 0.10
SHAPE_SIZES = [1 << i for i in range(1, 21)]  # 2 B .. 1 MiB: where the article's curves differ


def metric(p: Params, res: Any, name: str) -> float:
    r = res["results"][-1]
    if name == "bw_gbps":
        return r.bw_avg if p.report_gbits else r.bw_avg * 0x100000 * 8 / 1e9
    if name == "msg_rate_mpps":
        return float(r.msg_rate)
    if name == "t_typical_us":
        return float(r.t_typical)
    if name == "t_avg_us":
        return float(r.t_avg)
    raise ValueError(f"unknown metric {name!r}")


def simulate(tool: str, args: list[str], profile: str, iters: int | None) -> tuple[Params, Any]:
    argv = [*args, "--profile", profile]
    if iters is not None and "-n" not in args:
        argv += ["-n", str(iters)]
    p = parse(tool, argv)
    out, err = io.StringIO(), io.StringIO()
    try:
        res = run(p, out, err)
    except PerftestError as e:
        raise SystemExit(f"{tool} {' '.join(argv)}: {' '.join(e.lines).strip()}") from None
    return p, res


def figures(table: dict[str, Any], only: str | None, iters: int | None) -> list[dict]:
    rows = []
    for f in table["figures"]:
        if only and f["id"] != only:
            continue
        p, res = simulate(f["tool"], [str(a) for a in f["args"]], f["profile"], iters)
        sim = float(metric(p, res, f["metric"]))  # (numpy scalars do not go into JSON)
        ratio = sim / f["value"]
        rows.append({**{k: f[k] for k in ("id", "figure", "tool", "metric", "nic", "link",
                                           "size", "profile", "source")},
                     "command": f"nicsim perftest {f['tool']} "
                                f"{' '.join(map(str, f['args']))} --profile {f['profile']}",
                     "published": f["value"], "simulated": sim, "ratio": ratio,
                     "within_target": abs(ratio - 1) <= TARGET})
    return rows


def shape(s: dict[str, Any], iters: int | None) -> dict[str, Any]:
    """The same command under profiles a and b over SHAPE_SIZES: a never behind b (within
    1%: where both reach the wire's rate they tie), ahead at every size of the small end,
    and by its widest margin there."""
    curves: dict[str, list[float]] = {}
    for prof in (s["a"], s["b"]):
        vals = []
        for size in SHAPE_SIZES:
            n = iters or max(100, min(2000, (64 << 20) // size))
            p, res = simulate(s["tool"], ["-s", str(size), "--report_gbits"], prof, n)
            assert p.kind is TestKind.BW
            vals.append(float(metric(p, res, s["metric"])))
        curves[prof] = vals
    a, b = curves[s["a"]], curves[s["b"]]
    ratio = [x / y for x, y in zip(a, b, strict=True)]
    small = ratio[: len(ratio) // 3]
    large = ratio[-(len(ratio) // 3):]
    holds = bool(all(r >= 0.99 for r in ratio) and all(r > 1 for r in small)
                 and min(small) >= max(large))
    return {"id": s["id"], "claim": s["claim"], "source": s["source"], "sizes": SHAPE_SIZES,
            "a": s["a"], "b": s["b"], "a_gbps": a, "b_gbps": b, "ratio": ratio,
            "holds": holds}


def plot(sh: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=120)
    for key, label, mark in (("a", sh["a"], "o-"), ("b", sh["b"], "s--")):
        ax.plot(sh["sizes"], sh[f"{key}_gbps"], mark, label=label, markersize=4)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("ib_write_bw BW average (Gb/s)")
    ax.set_title("ib_write_bw, one RC QP, 10 GbE (simulated)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", metavar="ID", help="one figure or shape by its id")
    ap.add_argument("--iters", type=int, help="perftest -n for every run (default: perftest's)")
    ap.add_argument("--plot", metavar="DIR", help="write the shape plots (PNG) into DIR")
    ap.add_argument("--no-shapes", action="store_true", help="figures only")
    args = ap.parse_args()
    table = yaml.safe_load(TABLE.read_text())
    rows = figures(table, args.only, args.iters)
    shapes = [] if args.no_shapes else [
        shape(s, args.iters) for s in table.get("shapes", [])
        if not args.only or s["id"] == args.only]
    if args.plot:
        for sh in shapes:
            plot(sh, Path(args.plot) / f"fidelity_{sh['id']}.png")
    if args.json:
        print(json.dumps({"target": TARGET, "figures": rows, "shapes": shapes}, indent=2))
    else:
        print(f"{'id':<20} {'figure':<42} {'size':>6} {'profile':<10} {'published':>9} "
              f"{'simulated':>9} {'ratio':>6}  ok")
        for r in rows:
            print(f"{r['id']:<20} {r['figure'][:42]:<42} {r['size']:>6} {r['profile']:<10} "
                  f"{r['published']:>9.3f} {r['simulated']:>9.3f} {r['ratio']:>6.2f}  "
                  f"{'yes' if r['within_target'] else 'NO'}")
        for sh in shapes:
            print(f"\nshape {sh['id']}: {sh['claim']}")
            print(f"{'size':>8} {sh['a'] + ' Gb/s':>16} {sh['b'] + ' Gb/s':>16} {'ratio':>6}")
            for size, x, y, r in zip(sh["sizes"], sh["a_gbps"], sh["b_gbps"], sh["ratio"],
                                     strict=True):
                print(f"{size:>8} {x:>16.3f} {y:>16.3f} {r:>6.2f}")
            print("holds:", "yes" if sh["holds"] else "NO")
        n_ok = sum(r["within_target"] for r in rows)
        print(f"\n{n_ok} of {len(rows)} figures within {TARGET:.0%}")
    return 0 if all(r["within_target"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
