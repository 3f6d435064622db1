"""`nicsim` command line: run scenarios and sweeps, check pcaps.

Bad input (a scenario, an option, a path) gets one line on stderr and exit status 2; a run
that ends with errors, unverified bytes or outstanding WRs exits 1; output cut short by a
closed pipe (`| head`) ends quietly with 141, as a process killed by SIGPIPE would.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from nicsim.checks import physics
from nicsim.scenario.load import load
from nicsim.scenario.schema import ScenarioError
from nicsim.usage import OneLineParser, UsageError

DEFAULT_PCAP_DIR = "traces"  # the default template's directory, made if missing


def _probability(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"a probability is in [0, 1], not {v}")
    return v


def _overrides(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(flag as typed, key=value) for every option that changes a scenario field."""
    out = []
    if args.seed is not None:
        out.append((f"--seed {args.seed}", f"seed={args.seed}"))
    if args.profile is not None:
        out.append((f"--profile {args.profile}", f"profile={json.dumps(args.profile)}"))
    if args.host_profile is not None:
        out.append((f"--host-profile {args.host_profile}",
                    f"host.profile={json.dumps(args.host_profile)}"))
    for k in ("loss", "corrupt", "duplicate", "reorder"):
        v = getattr(args, k)
        if v is not None:
            out.append((f"--{k} {v}", f"link.faults.{k}={v}"))
    for a in args.set or []:
        out.append((f"--set {a}", a))
    return out


def _pcap_path(args: argparse.Namespace, sc: Any, out: Path | None) -> str | None:
    """Where the pcap goes: --pcap as given; with --out, inside it; else the scenario's
    template. Directories are made only for the default template ('traces/')."""
    if args.no_pcap:
        return None
    if args.pcap:
        path = Path(args.pcap)
        where = "--pcap"
    elif out is not None:
        return str(out / f"{sc.name}.pcap") if sc.pcap is not None else None
    else:
        t = sc.pcap_path()
        if t is None:
            return None
        path = Path(t)
        where = "pcap"
        if sc.pcap == "traces/{name}.pcap":
            Path(DEFAULT_PCAP_DIR).mkdir(exist_ok=True)
    if path.is_dir():
        raise UsageError(f"{where} {path}: is a directory")
    if not path.parent.is_dir():
        raise UsageError(f"{where} {path}: directory {path.parent} does not exist")
    # Fail now rather than after the run: the file must take a write (/dev/full does not).
    try:
        with path.open("wb") as f:
            f.write(b"\0" * 24)  # a pcap header's worth
            f.flush()
    except OSError as e:
        raise UsageError(f"{where} {path}: {e.strerror}") from None
    if path.is_file():
        # The capture makes it again (a fabric's captures are named after their ports and
        # leave this name unused: 24 zero bytes left here are no pcap).
        path.unlink()
    return str(path)


def _prepare_out(args: argparse.Namespace) -> Path | None:
    """`run --out DIR`: the result directory, checked writable before the run."""
    out = Path(args.out) if args.out else None
    if out is not None:
        from nicsim.results import output  # (matplotlib: only when there is a DIR to plot in)

        try:
            output.prepare_run(out, args.force)
        except output.OutputError as e:
            raise UsageError(str(e)) from None
    return out


def _run(args: argparse.Namespace) -> int:
    from nicsim.results.report import json_report, text_report
    from nicsim.scenario.progress import Progress
    from nicsim.scenario.runner import Runner

    sc, source = load(args.scenario, _overrides(args))
    if args.rtl is not None:
        return _run_rtl(args, sc, source)
    out = _prepare_out(args)
    pcap = _pcap_path(args, sc, out)
    base = Path(args.scenario).resolve().parent if args.scenario else None
    progress = Progress(enabled=False if args.quiet else None)
    runner = Runner(sc, pcap, out, progress, base, breakdown=args.breakdown)
    try:
        runner.memory()
    except ScenarioError as e:
        raise ScenarioError(f"{source}: {e}") from None
    try:
        result = runner.run()
        if out is not None:
            from nicsim.results import output

            result.files = output.write(result, out)
    except KeyboardInterrupt:
        if out is not None:
            from nicsim.results import output

            output.interrupted(out)
        raise
    except OSError as e:
        where = f"{e.filename}: " if e.filename else (f"{pcap}: " if pcap else "")
        raise UsageError(f"writing {where}{e.strerror or e}") from None
    if args.json:
        print(json.dumps(json_report(result), indent=2))
    else:
        print(text_report(result))
    if args.check:
        from nicsim.results.physics import check_result

        found = check_result(result)
        if found:
            raise physics.PhysicsViolation("\n".join(found))
    return 0 if result.ok else 1


def _run_rtl(args: argparse.Namespace, sc: Any, source: str) -> int:
    """`run --rtl HOST`: the scenario co-simulated with HOST's NIC the RTL (nicsim.scenario.rtl)."""
    from nicsim.scenario import rtl

    if args.breakdown:
        # The breakdown follows each WR through the model NIC's stages; the RTL has no such
        # trace (its waveform is the place to look).
        raise UsageError("--breakdown is not available with --rtl: it traces the model NIC's "
                         "stages, and the RTL NIC has no such trace")
    try:
        rtl.check(sc, args.rtl, args.rtl_width)
    except ScenarioError as e:
        raise ScenarioError(f"{source}: {e}") from None
    out = _prepare_out(args)
    pcap = _pcap_path(args, sc, out)
    if (warn := rtl.timer_warning(sc)) is not None:
        print(warn, file=sys.stderr)
    base = Path(args.scenario).resolve().parent if args.scenario else None
    src = str(Path(args.scenario).resolve()) if args.scenario else None
    try:
        text, report, ok, log = rtl.run(src, [list(o) for o in _overrides(args)], base, pcap,
                                        args.rtl_width, args.rtl_sim, out)
    except rtl.RtlError as e:
        raise UsageError(str(e)) from None
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"host {args.rtl}: RTL NIC (roce_nic, {args.rtl_width}-bit, {args.rtl_sim}); "
              f"simulator log {log}")
        print(text)
    return 0 if ok else 1


def _sweep(args: argparse.Namespace) -> int:
    from nicsim.sweep.cli import sweep_main

    return sweep_main(args)


def _pcap_check(args: argparse.Namespace) -> int:
    from nicsim.fabric.pcap import pcap_check_main

    return pcap_check_main(args.file)


def _calibrate(args: argparse.Namespace) -> int:
    from nicsim.calibrate import main as calibrate_main

    return calibrate_main(args)


def _profiles(args: argparse.Namespace) -> int:
    """List the shipped profiles (NIC, or host with --hosts), or show one field by field with
    its source."""
    from nicsim.profiles import (
        ProfileError,
        host_profile_names,
        load_host_profile,
        load_profile,
        profile_names,
    )

    names, load = (host_profile_names, load_host_profile) if args.hosts else \
        (profile_names, load_profile)
    if args.name is None:
        width = max(map(len, names()), default=0) + 2
        for n in names():
            print(f"{n:<{width}}{load(n).title}")
        return 0
    try:
        p = load(args.name)
    except ProfileError as e:
        raise UsageError(str(e)) from None
    print(f"{p.name}: {p.title}  ({p.path})")
    if not args.hosts:
        print(f"perftest device class: {p.perftest_device.value}")
    # (a host profile sets only what it knows: the other fields are the NIC profile's)
    values = {s: p.sections.get(s, {}) for s in p.kinds} if args.hosts else p.values()
    for s in p.kinds:
        if not values[s]:
            continue
        print(f"{s}:")
        for k, v in values[s].items():
            src = p.sources.get(f"{s}.{k}")
            given = k in p.sections.get(s, {})
            note = f"  # {src}" if src else ("" if given else "  # model default")
            print(f"  {k}: {v}{note}")
    if args.hosts:
        print("(every other pcie and cpu field: the NIC profile's)")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="nicsim", description="An RDMA (RoCEv2) NIC simulator.")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=OneLineParser)
    run = sub.add_parser("run", help="run a scenario (the built-in default without FILE)")
    run.add_argument("scenario", nargs="?", help="scenario YAML file")
    run.add_argument("--json", action="store_true", help="print the result as JSON")
    pc = run.add_mutually_exclusive_group()
    pc.add_argument("--pcap", help="write the link's frames here (default: the scenario's)")
    pc.add_argument("--no-pcap", action="store_true", help="do not write a pcap")
    run.add_argument("--seed", type=int, help="override the scenario's seed (data and faults)")
    run.add_argument("--profile", metavar="NAME|FILE",
                     help="NIC, PCIe, link and CPU profile (nicsim profiles lists them); the "
                          "scenario's own fields win")
    run.add_argument("--host-profile", metavar="NAME|FILE",
                     help="the host around the NIC: PCIe and CPU (nicsim profiles --hosts "
                          "lists them), over the NIC profile's; the scenario's own fields win")
    for name, what in (("loss", "drop"), ("corrupt", "flip one bit of"),
                       ("duplicate", "deliver twice"), ("reorder", "delay (up to reorder_ns)")):
        run.add_argument(f"--{name}", type=_probability, metavar="P",
                         help=f"probability to {what} each frame on the link (both ways)")
    run.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="set any scenario field, e.g. link.rate_gbps=25 or flows[0].load=0.5 "
                          "(repeatable)")
    run.add_argument("--out", metavar="DIR", help="write flows.csv, time series, summary.json, "
                                                 "plots and report.html into DIR (new or empty)")
    run.add_argument("--force", action="store_true",
                     help="--out into a directory that holds an earlier run's results: "
                          "replace them (other files stay)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--check", action="store_true",
                     help="check the run against physics (wire rate, completions after their "
                          "packets, counters that add up); a violation fails the run (exit 3)")
    run.add_argument("--breakdown", action="store_true",
                     help="stamp every WR of the first host to the second at each stage "
                          "(post, doorbell, WQE fetch, ... CQE, poll): mean and p99 per stage "
                          "in the report and the JSON")
    run.add_argument("--rtl", metavar="HOST",
                     help="co-simulate: HOST's NIC is the RTL (hdl_tb/rtl/roce_nic.v, on Icarus "
                          "Verilog or Verilator under cocotb), the other host's the model; "
                          "two-host scenarios, HOST the first host")
    run.add_argument("--rtl-width", type=int, choices=(64, 512), default=64,
                     help="the RTL's datapath width in bits (default 64)")
    run.add_argument("--rtl-sim", choices=("icarus", "verilator"), default="icarus",
                     help="the HDL simulator (default icarus)")
    run.set_defaults(fn=_run)
    sw = sub.add_parser("sweep", help="run a scenario over a grid of parameters and seeds")
    sw.add_argument("sweep", help="sweep YAML file")
    sw.add_argument("--out", metavar="DIR", help="result directory (default: the sweep's)")
    sw.add_argument("--workers", type=int, metavar="N",
                    help="local processes (default: every core)")
    sw.add_argument("--dask", metavar="ADDRESS",
                    help="submit the points to this Dask scheduler (pip install nicsim[dask])")
    sw.add_argument("--quiet", action="store_true", help="no progress lines")
    sw.add_argument("--set", action="append", metavar="KEY=VALUE",
                    help="set a scenario field for every point, as the sweep's own set: "
                         "does (repeatable; e.g. flows[0].count=100 to shrink a sweep)")
    sw.add_argument("--check", action="store_true",
                    help="check every point's run against physics (see nicsim run --check)")
    sw.set_defaults(fn=_sweep)
    pr = sub.add_parser("profiles", help="list the NIC profiles, or show one with its sources")
    pr.add_argument("name", nargs="?", help="a profile name or file")
    pr.add_argument("--hosts", action="store_true", help="host profiles instead")
    pr.set_defaults(fn=_profiles)
    sub.add_parser("perftest", help="perftest's tools (ib_write_bw, ib_send_lat, ...) on a "
                                    "simulated host pair: nicsim perftest TOOL --help")
    sub.add_parser("exec", help="run a program (pyverbs, or any Python verbs program) on a "
                                "simulated world: nicsim exec --help")
    cal = sub.add_parser("calibrate", help="fit a profile to perftest outputs of real "
                                           "hardware (text or --out_json files)")
    cal.add_argument("files", nargs="+", metavar="FILE",
                     help="perftest's client output as printed, or its --out_json file")
    cal.add_argument("--base", required=True, metavar="NAME|FILE",
                     help="the profile to start from (nicsim profiles lists them); the "
                          "written profile extends it")
    cal.add_argument("--out", required=True, metavar="FILE.yaml",
                     help="write the fitted profile here (base: and the fitted values, each "
                          "with its source)")
    cal.add_argument("--params", metavar="P[,P...]",
                     help="the parameters to fit, section.field or nic.pipeline_ns (default: "
                          "pcie.latency_ns, nic.pipeline_ns, nic.wqe_parse_cycles, and "
                          "cpu.post_send_ns, cpu.poll_cqe_ns where the base sets them)")
    cal.add_argument("--iters", type=int, default=200, metavar="N",
                     help="perftest -n of each simulated figure (default 200; large BW "
                          "messages fewer)")
    cal.add_argument("--max-evals", type=int, default=40, metavar="N",
                     help="evaluations of the whole figure set the optimizer may spend "
                          "(default 40)")
    cal.add_argument("--json", action="store_true",
                     help="print the report as one JSON object")
    cal.set_defaults(fn=_calibrate)
    pcp = sub.add_parser("pcap", help="pcap tools")
    pcs = pcp.add_subparsers(dest="pcap_cmd", required=True, parser_class=OneLineParser)
    chk = pcs.add_parser("check", help="validate every frame of a capture")
    chk.add_argument("file")
    chk.set_defaults(fn=_pcap_check)
    return ap


def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else argv)[:1] == ["exec"]:
        # `nicsim exec [options] -- COMMAND`: a program on the simulated world (nicsim.exec)
        from nicsim.exec.launch import main as exec_main

        return exec_main((sys.argv[1:] if argv is None else argv)[1:])
    if (sys.argv[1:] if argv is None else argv)[:1] == ["perftest"]:
        # `nicsim perftest TOOL [perftest flags]`: perftest's own command line (getopt style)
        from nicsim.apps.perftest import main as perftest_main

        return _quiet_pipe(lambda: perftest_main((sys.argv[1:] if argv is None else argv)[1:]))
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return _interrupted()


def _main(argv: list[str] | None) -> int:
    try:
        try:
            args = parser().parse_args(argv)
            if getattr(args, "check", False):
                # (the environment carries it to a sweep's worker processes)
                os.environ["NICSIM_CHECK"] = "1"
            physics.enabled_by_environment()
            return int(args.fn(args))
        except (ScenarioError, UsageError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except physics.PhysicsViolation as e:
            print(f"error: the run broke physics:\n{e}", file=sys.stderr)
            return 3
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        return _broken_pipe()


def _broken_pipe() -> int:
    """The reader went away (`| head`): stop quietly. Python would complain again when it
    flushes stdout at exit, so stdout goes to /dev/null first."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141


def _interrupted() -> int:
    """Ctrl-C: one line, and the shell's status for SIGINT (128 + 2)."""
    sys.stdout.flush()
    print("interrupted", file=sys.stderr)
    return 130


def _quiet_pipe(fn: Any) -> int:
    try:
        return int(fn())
    except BrokenPipeError:
        return _broken_pipe()
    except KeyboardInterrupt:
        return _interrupted()


if __name__ == "__main__":
    sys.exit(main())
