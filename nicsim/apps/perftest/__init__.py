"""`nicsim perftest TOOL [flags]`: perftest's eight RDMA tools on a simulated pair of hosts.

    nicsim perftest ib_write_bw -a --report_gbits --profile cx5-100g
    nicsim perftest ib_send_lat -s 32 --profile cx5-100g

Both ends run in one world (host a the client, host b the server) and the output is the
client's, as perftest prints it; --server-output=FILE writes what the server would print
(its header, address lines and table) to FILE ("-": our stdout, after the client's). With -b
both ends send and each table reports the sum of both directions, as perftest's does.
nicsim's own options: --profile NAME|FILE (the hardware), --seed N (host CPU cost variation
and PSNs), --breakdown (where each WR's time goes).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from nicsim.apps.perftest.params import (
    TOOLS,
    Conn,
    HelpExit,
    Params,
    PerftestError,
    TestKind,
    Verb,
    parse,
)
from nicsim.checks import physics
from nicsim.driver.user.errors import PyverbsRDMAError

if TYPE_CHECKING:  # (the simulation and its reports load when a test runs, not for --help)
    from nicsim.apps.perftest.bench import Bench, Timing

__all__ = ["TOOLS", "main", "run"]

USAGE = """Usage: nicsim perftest TOOL [options]
 TOOL: {tools}
 -s, --size=<size>        Size of message to exchange (K and M suffixes)
 -a, --all                Run sizes from 2 till 2^23
 -b, --bidirectional      Measure bidirectional bandwidth (BW tests; both ends send, and
                          each end reports the sum of both directions)
 -n, --iters=<iters>      Number of exchanges (at least 5)
 -D, --duration=<sec>     Run for a fixed duration (seconds of simulated time; margin D/4)
 -q, --qp=<num>           Num of qp's
 -t, --tx-depth=<dep>     Size of tx queue
 -I, --inline_size=<size> Max size of message to be sent in inline
 -m, --mtu=<mtu>          MTU size: 256 - 4096 (default port mtu)
 -F, --CPU-freq           Do not fail even if cpufreq_ondemand module is loaded (accepted)
 -R, --rdma_cm            Connect QPs with rdma_cm (accepted; QPs are connected directly)
 -x, --gid-index=<index>  Test uses GID with GID index
 -c, --connection=<type>  Connection type RC/UC/UD (nicsim's NIC: RC, UC, and UD for SEND)
 -Q, --cq-mod             Generate Cqe only after <--cq-mod> completion
 -N, --noPeak             Skip the peak bandwidth calculation
 -A, --atomic_type=<type> CMP_AND_SWAP or FETCH_AND_ADD (atomic tests)
 -o, --outs=<num>         Outstanding reads/atomics (default: the device's maximum)
 -r, --rx-depth=<dep>     Size of receive queue (SEND tests)
 --report_gbits           Report bandwidth in Gb/sec instead of MiB/sec
 --out_json               Write the results as JSON (--out_json_file=<path>)
 nicsim options:
 --profile=<name|file>    The NIC, PCIe, link and host CPU (nicsim profiles lists them)
 --host-profile=<n|file>  The host around the NIC: its PCIe and CPU over the profile's
                          (nicsim profiles --hosts lists them)
 --seed=<n>               Seed of the host CPU cost variation and the PSNs (default 1)
 --breakdown              Print where each WR's time goes, stage by stage (mean and p99)
 --check                  Check the run against physics (wire rate, completions after their
                          packets, counters that add up); a violation fails the run (exit 3)
 --waterfall=<file.png>   Plot one WR's stages (the median one) as a waterfall
 --server-output=<file>   Also write what perftest's server (host b) would print: its
                          warnings, the "Waiting for client" banner, its header and address
                          lines, and its results table where it has one (BW tests,
                          ib_write_lat, ib_send_lat). "-": on stdout, after the client's
"""


def _world(p: Params) -> tuple[Any, Any]:
    """The two-host world of the profile, and its perftest device class."""
    from nicsim.profiles import PerftestDevice, ProfileError, load_profile
    from nicsim.scenario.build import build_world
    from nicsim.scenario.schema import ScenarioError, validate

    device = PerftestDevice.UNKNOWN
    # (a scenario carries the profile merge and validation; its one op is never run)
    data: dict[str, Any] = {"name": "perftest", "pcap": None, "ops": [{"op": "write"}]}
    if p.profile is not None:
        try:
            device = load_profile(p.profile).perftest_device
        except ProfileError as ex:
            raise PerftestError(f"nicsim perftest: --profile: {ex}", code=2) from None
        data["profile"] = p.profile
    if p.host_profile is not None:
        data["host"] = {"profile": p.host_profile}
    try:
        sc = validate(data, "--profile")
    except ScenarioError as ex:
        raise PerftestError(f"nicsim perftest: {ex}", code=2) from None
    slot = -(-(max(p.sizes) + 4096) // 4096) * 4096
    mem = (64 << 20) + 2 * slot * p.num_qps + p.num_qps * (256 << 10)
    # (the seed is perftest's --seed, any int: set after validation, as the scenario's
    # own seed field is narrower)
    return build_world(sc.model_copy(update={"seed": p.seed}), None, mem), device


def _inline_default(p: Params, device: Any, out: list[str]) -> int:
    """perftest's ctx_set_max_inline: a ConnectX gets 220 B (WRITE) or 236 B (SEND; 188 on
    UD) in latency tests, a device perftest does not know gets none."""
    if not device.mellanox:
        if p.inline >= 0:
            out += ["-" * 87, "Device not recognized to implement inline feature. "
                              "Disabling it"]
        p.inline = 0
        return 0
    if p.kind is TestKind.LAT and p.verb is Verb.WRITE:
        return 220
    if p.kind is TestKind.LAT and p.verb is Verb.SEND:
        return 188 if p.conn is Conn.UD else 236
    return 0


def _result(p: Params, size: int, t: Timing) -> Any:
    """One end's row for one size from what it timed: perftest's print_report_bw or
    print_report_lat, or their duration forms on a window."""
    from nicsim.apps.perftest import report

    win = t.window
    if win is not None:
        timed = report.bw_timed if p.kind is TestKind.BW else report.lat_timed
        return timed(p, size, win.sample, win.stop, win.iters)
    if p.kind is TestKind.BW:
        return report.bw_result(p, size, t.posted, t.completed, p.iters * p.num_qps)
    return report.lat_result(p, size, t.posted)


def _server_output(p: Params, bench: Bench, notes: list[str], rows: list[Any]) -> list[str]:
    """What the server process prints on stdout: its warnings (the inline note's dashed line
    too), the banner, its header (ctx_print_test_info as a server), its own and the client's
    address lines, then its table: a BW server's (in a unidirectional WRITE, READ or atomic
    test the client's last row, which the client sends it at the end), ib_write_lat's and
    ib_send_lat's (its own timings); ib_read_lat's and ib_atomic_lat's server has none."""
    from nicsim.apps.perftest import report

    out = [*p.server_warnings, *(ln for ln in notes if "Device not recognized" not in ln),
           *report.BANNER, *report.header(p, bench.setup, server=True)]
    for q in range(p.num_qps):
        out += report.dest_lines(p, "local", bench.dest(bench.server, q))
    for q in range(p.num_qps):
        out += report.dest_lines(p, "remote", bench.dest(bench.client, q))
    if p.kind is TestKind.BW:
        out += report.bw_columns(p)
    elif p.verb in (Verb.WRITE, Verb.SEND):
        out += report.lat_columns(p)
    return [*out, *(r.line() for r in rows), report.LINE]


def run(p: Params, stdout: TextIO, stderr: TextIO) -> dict[str, Any]:
    """Run the test and print perftest's output; the results as a dict (for benchmarks)."""
    from nicsim.apps.perftest import report
    from nicsim.apps.perftest.bench import Bench

    if not report.conn_supported(p):
        raise PerftestError(f" Couldn't create IB resources (nicsim's NIC has no {p.conn.value}"
                            f" QPs{' for this verb' if p.conn is Conn.UD else ''}: RC, UC, "
                            f"and UD for SEND)")
    w, device = _world(p)
    notes: list[str] = []
    inline = _inline_default(p, device, notes)
    bench = Bench(p, w, inline)
    # perftest prints its warnings on stdout, and the dashed line before an inline note too;
    # the MTU complaint and the inline note themselves go to stderr.
    for line in p.warnings:
        print(line, file=stdout)
    for line in bench.mtu_warning:
        print(line, file=stderr)
    for line in notes:
        print(line, file=stderr if "Device not recognized" in line else stdout)
    s = bench.setup
    lines = report.header(p, s)
    for q in range(p.num_qps):
        lines += report.dest_lines(p, "local", bench.dest(bench.client, q))
    for q in range(p.num_qps):
        lines += report.dest_lines(p, "remote", bench.dest(bench.server, q))
    lines += report.bw_columns(p) if p.kind is TestKind.BW else report.lat_columns(p)
    print("\n".join(lines), file=stdout, flush=True)
    results: list[Any] = []
    server_rows: list[Any] = []
    # Each end of a bidirectional run measures what it sent and prints the sum of both ends'
    # figures; a bidirectional SEND's duration run counts both directions at each end already,
    # so each prints its own (perftest's send_bw).
    summed = p.duplex and not (p.verb is Verb.SEND and p.duration is not None)
    for size in p.sizes:
        try:
            mine, theirs = bench.run(size)
        except PyverbsRDMAError as ex:  # (a device without atomics refuses them: EINVAL)
            raise PerftestError(f"Couldn't post send: qp 0 scnt=0 ({ex})") from None
        r = _result(p, size, mine)
        if theirs is not None:
            sr = _result(p, size, theirs)
            if summed:
                r, sr = report.bw_sum(r, sr), report.bw_sum(sr, r)
            server_rows.append(sr)
        results.append(r)
        print(r.line(), file=stdout, flush=True)
    print(report.LINE, file=stdout, flush=True)
    if p.kind is TestKind.BW and not server_rows:
        server_rows = results[-1:]  # (the client's report, exchanged once, at the end)
    extra: dict[str, Any] = {"profile": p.profile, "seed": p.seed,
                             "simulated_ns": w.env.now}
    if bench.tracer is not None:
        from nicsim.trace import breakdown

        summary = bench.tracer.summary()
        extra["breakdown"] = summary
        print("\n".join([*breakdown.text(summary), report.LINE]), file=stdout, flush=True)
        if p.waterfall:
            wr = bench.tracer.typical()
            if wr is None:
                raise PerftestError("nicsim perftest: --waterfall: no WR went through every "
                                    "stage", code=2)
            breakdown.waterfall(wr, p.waterfall, f"{p.tool} {max(p.sizes)} B, "
                                                 f"{p.profile or 'default hardware'}: one WR")
    if p.out_json:
        Path(p.out_json_file).write_text(report.out_json(p, s, results, extra) + "\n")
    if p.server_output is not None:
        text = "\n".join(_server_output(p, bench, notes, server_rows))
        if p.server_output == "-":
            print(text, file=stdout, flush=True)
        else:
            Path(p.server_output).write_text(text + "\n")
    w.close()
    return {"setup": s, "results": results, "server_results": server_rows, "world": w}


def main(argv: list[str], stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    if not argv or argv[0] in ("-h", "--help"):
        # (no tool at all is a usage error: the text goes to stderr, exit status 2)
        print(USAGE.format(tools=", ".join(TOOLS)), file=stdout if argv else stderr)
        return 0 if argv else 2
    try:
        p = parse(argv[0], argv[1:])
        if p.check:
            physics.enable()
        physics.enabled_by_environment()
        run(p, stdout, stderr)
    except physics.PhysicsViolation as ex:
        print(f"nicsim perftest: the run broke physics:\n{ex}", file=stderr)
        return 3
    except HelpExit:
        print(USAGE.format(tools=", ".join(TOOLS)), file=stdout)
        return 0
    except PerftestError as ex:
        if ex.stdout:
            print(ex.stdout, file=stdout)
        print("\n".join(ex.lines), file=stderr)
        return ex.code
    return 0
