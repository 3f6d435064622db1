"""`nicsim` command line: run scenarios, check pcaps."""

from __future__ import annotations

import argparse
import json
import sys

from nicsim.scenario.schema import DEFAULT, ScenarioError, load_scenario


def _probability(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"a probability is in [0, 1], not {v}")
    return v


def _run(args: argparse.Namespace) -> int:
    from nicsim.scenario.report import json_report, text_report
    from nicsim.scenario.runner import Runner, default_pcap

    try:
        sc = load_scenario(args.scenario or DEFAULT)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.seed is not None:
        sc = sc.model_copy(update={"seed": args.seed})
    faults = {k: getattr(args, k) for k in ("loss", "corrupt", "duplicate", "reorder")
              if getattr(args, k) is not None}
    if faults:
        f = sc.link.faults.model_copy(update=faults)
        sc = sc.model_copy(update={"link": sc.link.model_copy(update={"faults": f})})
    pcap = None if args.no_pcap else (args.pcap or default_pcap(sc))
    runner = Runner(sc, pcap)
    try:
        runner.memory()
    except ScenarioError as e:
        print(f"error: {args.scenario or DEFAULT}: {e}", file=sys.stderr)
        return 2
    result = runner.run()
    if args.json:
        print(json.dumps(json_report(result), indent=2))
    else:
        print(text_report(result))
    return 0 if result.ok else 1


def _pcap_check(args: argparse.Namespace) -> int:
    from nicsim.fabric.pcap import pcap_check_main

    return pcap_check_main(args.file)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="nicsim", description="An RDMA (RoCEv2) NIC simulator.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run a scenario (the built-in default without FILE)")
    run.add_argument("scenario", nargs="?", help="scenario YAML file")
    run.add_argument("--json", action="store_true", help="print the result as JSON")
    run.add_argument("--pcap", help="write the link's frames here (default: the scenario's)")
    run.add_argument("--no-pcap", action="store_true", help="do not write a pcap")
    run.add_argument("--seed", type=int, help="override the scenario's seed (data and faults)")
    for name, what in (("loss", "drop"), ("corrupt", "flip one bit of"),
                       ("duplicate", "deliver twice"), ("reorder", "delay (up to reorder_ns)")):
        run.add_argument(f"--{name}", type=_probability, metavar="P",
                         help=f"probability to {what} each frame on the link (both ways)")
    run.set_defaults(fn=_run)
    pc = sub.add_parser("pcap", help="pcap tools")
    pcs = pc.add_subparsers(dest="pcap_cmd", required=True)
    chk = pcs.add_parser("check", help="validate every frame of a capture")
    chk.add_argument("file")
    chk.set_defaults(fn=_pcap_check)
    args = ap.parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
