"""`nicsim perftest TOOL [flags]`: perftest's eight RDMA tools on a simulated pair of hosts.

    nicsim perftest ib_write_bw -a --report_gbits --profile cx5-100g
    nicsim perftest ib_send_lat -s 32 --profile cx5-100g

Both ends run in one world (host a the client, host b the server) and the output is the
client's, as perftest prints it. nicsim's own options: --profile NAME|FILE (the hardware),
--seed N (host CPU cost variation and PSNs), --breakdown (where each WR's time goes).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

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

__all__ = ["TOOLS", "main", "run"]

USAGE = """Usage: nicsim perftest TOOL [options]
 TOOL: {tools}
 -s, --size=<size>        Size of message to exchange (K and M suffixes)
 -a, --all                Run sizes from 2 till 2^23
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
 --seed=<n>               Seed of the host CPU cost variation and the PSNs (default 1)
 --breakdown              Print where each WR's time goes, stage by stage (mean and p99)
 --check                  Check the run against physics (wire rate, completions after their
                          packets, counters that add up); a violation fails the run (exit 3)
 --waterfall=<file.png>   Plot one WR's stages (the median one) as a waterfall
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
    for size in p.sizes:
        try:
            posted, completed = bench.run(size)
        except PyverbsRDMAError as ex:  # (a device without atomics refuses them: EINVAL)
            raise PerftestError(f"Couldn't post send: qp 0 scnt=0 ({ex})") from None
        win = bench.window
        if win is not None:
            timed = report.bw_timed if p.kind is TestKind.BW else report.lat_timed
            r = timed(p, size, win.sample, win.stop, win.iters)
        elif p.kind is TestKind.BW:
            r = report.bw_result(p, size, posted, completed, p.iters * p.num_qps)
        else:
            r = report.lat_result(p, size, posted)
        results.append(r)
        print(r.line(), file=stdout, flush=True)
    print(report.LINE, file=stdout, flush=True)
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
    w.close()
    return {"setup": s, "results": results, "world": w}


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
