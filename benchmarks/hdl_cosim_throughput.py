"""roce_nic throughput and co-simulation speed: RDMA WRITEs from the RTL NIC (host a) to the
SimPy model (host b) over a 400 Gb/s cable (faster than the design), 64 B to 64 KiB, a few
messages per size posted back to back (hdl_tb/bench_cosim_throughput.py), at DATA_WIDTH 512
and 64.

Per size: cycles per data packet on the RTL's MAC transmit stream (m_axis_tx, from the first
frame's first beat to the last frame's first beat, per packet) against the ideal, the sum of
ceil(frame bytes / (DATA_WIDTH/8)) beats of the same frames, and the payload Gb/s that means at
the RTL clock (250 MHz at 512 bits; 156.25 MHz at 64 bits, the FPGA profile's clock). The
co-simulation runs at that clock, so PCIe and link latencies are in real time. Per run:
simulated RTL cycles and data packets per wall second, and the share of the wall time spent
running the RTL simulator (nicsim.cosim.clock's rtl_wall) rather than in the bridge, SimPy and
the driver. Cycle counts are exact; wall-clock figures depend on the machine.

    python benchmarks/hdl_cosim_throughput.py [--json] [--sim icarus|verilator]
        [--widths 512,64] [--sizes 64:8,256:8,...] [--mtu 4096] [--trace] [--param NAME=VALUE]
        [--pcie-gen 3|4|5] [--post-ns NS]

--pcie-gen and --post-ns change the host (its PCIe x16 generation, the CPU's cost of a
post_send): with a faster host the figures show the NIC's own limits.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from nicsim.cosim.build import (
    PARAMS_ENV,
    roce_nic_params,
    roce_nic_sources,
    run,
    simulator_available,
    stdout_to_stderr,
)
from nicsim.testing.cosim_throughput import DEFAULT_SIZES, MTU_ENUM, parse_sizes, size_figures

CLK_NS = {512: 4.0, 64: 6.4}   # 250 MHz; 156.25 MHz
LINE_GBPS = 100.0


def _mean_gap(ts: list[float], clk_ns: float) -> float | None:
    return (ts[-1] - ts[0]) / (len(ts) - 1) / clk_ns if len(ts) > 1 else None


# roce_req's states (hdl_tb/rtl/roce_req.v R_*)
REQ_STATES = ["IDLE", "CTX", "EVAL", "WAIT", "CHK", "CHKD", "CQE", "START", "RUN", "FULL"]


def state_cycles(changes: list[list[float]], t0: float, t1: float, clk_ns: float) -> dict:
    """Cycles roce_req spent in each state between t0 and t1, from its state changes."""
    out: dict[str, float] = {}
    for (t, st), nxt in zip(changes, [*changes[1:], [t1, -1]], strict=True):
        a, b = max(t, t0), min(nxt[0], t1)
        if b > a:
            name = REQ_STATES[int(st)] if int(st) < len(REQ_STATES) else str(st)
            out[name] = out.get(name, 0.0) + (b - a) / clk_ns
    return out


def stage_figures(g: dict, trace: dict[str, list], clk_ns: float) -> dict:
    """From a BENCH_TRACE run: the mean interval, in cycles, between consecutive events of each
    stage while this size ran (doorbells as the CPU rings them, WQEs fetched, WQEs taken by the
    requester, payload reads issued, descriptors to the framer, frames), and the latency from
    the last post to the first WQE the requester takes."""
    t0, t1 = g["post_ns"], g["done_ns"]
    row: dict = {"size": g["size"]}
    for name, ts in trace.items():
        if name == "req_state":
            continue
        inside = [t for t in ts if t0 <= t <= t1]
        row[f"{name}_events"] = len(inside)
        row[f"{name}_gap_cycles"] = _mean_gap(inside, clk_ns)
    row["frame_gap_cycles"] = _mean_gap([f["start_ns"] for f in g["frames"]], clk_ns)
    row["post_gap_cycles"] = _mean_gap(g["posted_ns"], clk_ns)
    wqes = [t for t in trace.get("wqe", []) if t0 <= t <= t1]
    if wqes:
        row["first_wqe_after_post_ns"] = wqes[0] - t0
        # the requester's cycles per WQE in each state, between taking the first and the last
        # WQE (one WQE: until its last frame)
        end, n = (wqes[-1], len(wqes) - 1) if len(wqes) > 1 else \
            (g["frames"][-1]["start_ns"], 1)
        per = state_cycles(trace.get("req_state", []), wqes[0], end, clk_ns)
        row["req_state_cycles_per_wqe"] = {k: v / n for k, v in per.items()}
    return row


def run_summary(line: dict) -> dict:
    lanes = line["data_width"] // 8
    pcie = (line["pcie_bytes_per_ns"], line["tlp_overhead"]) if "tlp_overhead" in line else None
    sizes = [size_figures(g, lanes, line["clk_ns"], pcie) for g in line["groups"]]
    stages = [stage_figures(g, line["trace"], line["clk_ns"]) for g in line["groups"]] \
        if line["trace"] else []
    return {"simulator": line["simulator"], "data_width": line["data_width"],
            "clock_mhz": 1000.0 / line["clk_ns"], "mtu": line["mtu"], "sizes": sizes,
            "sim_us": line["sim_ns"] / 1000, "rtl_cycles": line["rtl_cycles"],
            "wall_s": line["wall_s"], "rtl_cycles_per_s": line["rtl_cycles"] / line["wall_s"],
            "data_packets_per_s": line["data_frames"] / line["wall_s"],
            "rtl_wall_share": line["rtl_wall_s"] / line["wall_s"],
            "cpu_s": line["cpu_s"], "rtl_cycles_per_cpu_s": line["rtl_cycles"] / line["cpu_s"],
            "data_packets_per_cpu_s": line["data_frames"] / line["cpu_s"],
            "rtl_cpu_share": line["rtl_cpu_s"] / line["cpu_s"],
            "catchups": line["catchups"], "window_ns": line["window_ns"],
            "params": line.get("params", {}), "stages": stages,
            "pcie_gen": line.get("pcie_gen"), "post_ns": line.get("post_ns")}


def print_table(r: dict) -> None:
    ideal_gbps = r["data_width"] * r["clock_mhz"] / 1000
    extra = "".join(f", {k} {v}" for k, v in r["params"].items() if k in r["overrides"])
    print(f"\n{r['simulator']}, DATA_WIDTH {r['data_width']} at {r['clock_mhz']:g} MHz "
          f"(stream at most {ideal_gbps:g} Gb/s), path MTU {r['mtu']}{extra}; line rate "
          f"{LINE_GBPS:g} Gb/s; host: PCIe Gen{r['pcie_gen']} x16, post_send {r['post_ns']:g} ns")
    print(f"{'size':>6} {'msgs':>4} {'pkts':>4} {'cyc/pkt':>8} {'ideal':>7} {'frac':>5} "
          f"{'Gb/s':>6} {'PCIe':>6} {'in-msg':>7} {'between':>8} {'1st frame':>9}")
    for s in r["sizes"]:
        if "cycles_per_packet" not in s:
            print(f"{s['size']:>6} {s['messages']:>4} {s['frames']:>4}   (one frame)")
            continue
        inm = f"{s['in_message_cycles_per_packet']:7.1f}" if "in_message_ideal" in s else \
            "      -"
        btw = f"{s['between_messages_cycles']:8.1f}" if "between_messages_ideal" in s else \
            "       -"
        pb = f"{s['pcie_bound_gbps']:6.1f}" if "pcie_bound_gbps" in s else "     -"
        print(f"{s['size']:>6} {s['messages']:>4} {s['frames']:>4} "
              f"{s['cycles_per_packet']:8.1f} {s['ideal_cycles_per_packet']:7.1f} "
              f"{s['fraction_of_ideal']:5.2f} {s['payload_gbps']:6.1f} {pb} {inm} {btw} "
              f"{s['first_frame_after_post_ns']:7.0f}ns")
    print(f"speed: {r['sim_us']:.1f} us simulated = {r['rtl_cycles']:,.0f} RTL cycles in "
          f"{r['wall_s']:.1f} s wall: {r['rtl_cycles_per_s']:,.0f} cycles/s, "
          f"{r['data_packets_per_s']:.2f} data packets/s, {100 * r['rtl_wall_share']:.0f}% of "
          f"the wall time in the RTL simulator ({r['catchups']} catch-ups of "
          f"{r['window_ns']:g} ns)")
    print(f"       per CPU second of the simulator process ({r['cpu_s']:.1f} s): "
          f"{r['rtl_cycles_per_cpu_s']:,.0f} cycles/s, {r['data_packets_per_cpu_s']:.2f} data "
          f"packets/s, {100 * r['rtl_cpu_share']:.0f}% of the CPU time in the RTL simulator")
    if r["stages"]:
        names = ["post", "doorbell", "wqe_ar", "wqe", "pay_ar", "hdr", "frame"]
        print("mean cycles between consecutive events per size (BENCH_TRACE): "
              + ", ".join(names))
        for st in r["stages"]:
            cells = [st.get(f"{n}_gap_cycles") for n in names]
            print(f"{st['size']:>6} " + " ".join(f"{c:8.1f}" if c is not None else "       -"
                                                  for c in cells)
                  + f"   first WQE {st.get('first_wqe_after_post_ns', 0):.0f} ns after the "
                  "first post")
        print("roce_req's cycles per WQE by state (between taking its first and last WQE):")
        for st in r["stages"]:
            per = st.get("req_state_cycles_per_wqe", {})
            print(f"{st['size']:>6} " + ", ".join(f"{k} {v:.1f}" for k, v in per.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--sim", choices=["icarus", "verilator"], default="icarus")
    ap.add_argument("--widths", default="512,64")
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="size:messages,...")
    ap.add_argument("--mtu", type=int, default=4096, choices=sorted(MTU_ENUM))
    ap.add_argument("--trace", action="store_true",
                    help="record the requester's handshakes each cycle (slower; per-stage "
                    "intervals)")
    ap.add_argument("--pcie-gen", type=int, default=3, choices=[3, 4, 5],
                    help="the hosts' PCIe generation (x16)")
    ap.add_argument("--post-ns", type=float, default=None,
                    help="the CPU's cost of a post_send in ns (default: CpuCosts', 80)")
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="override a roce_nic parameter, e.g. PAY_DEPTH=256 (the requester's "
                    "payload FIFO, beats) or WQE_OUTSTANDING=8 (WQE reads in flight)")
    args = ap.parse_args()
    try:
        parse_sizes(args.sizes)
        widths = [int(x) for x in args.widths.split(",")]
    except ValueError as ex:
        ap.error(f"bad --sizes or --widths: {ex}")
    if bad := [x for x in widths if x not in CLK_NS]:
        ap.error(f"--widths: {bad} not one of {sorted(CLK_NS)}")
    if args.post_ns is not None and not args.post_ns > 0:
        ap.error(f"--post-ns {args.post_ns:g}: want a positive number of ns")
    overrides: dict[str, int] = {}
    for p in args.param:
        name, eq, value = p.partition("=")
        if not eq or not name.isidentifier() or not value.isdigit():
            ap.error(f"--param {p!r}: want NAME=VALUE with a decimal VALUE")
        overrides[name] = int(value)
    if not simulator_available(args.sim):
        print(f"simulator {args.sim} is not installed", file=sys.stderr)
        return 1
    results = []
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "cosim.jsonl"
        for w in widths:
            params = roce_nic_params(w)
            params |= overrides
            env = {PARAMS_ENV: json.dumps(params), "HDL_BENCH_OUT": str(out),
                   "BENCH_SIZES": args.sizes, "BENCH_MTU": str(args.mtu),
                   "BENCH_CLK_NS": str(CLK_NS[w]), "BENCH_TRACE": "1" if args.trace else "0",
                   "BENCH_PCIE_GEN": str(args.pcie_gen)}
            if args.post_ns is not None:
                env["BENCH_POST_NS"] = repr(args.post_ns)
            with stdout_to_stderr():
                failed = run("roce_nic", roce_nic_sources(), "bench_cosim_throughput", params,
                             sim=args.sim, extra_env=env)
            if failed:   # the bench's accounting failed (its log says how)
                print(f"DATA_WIDTH {w}: the cocotb bench failed", file=sys.stderr)
                return 1
        results = [run_summary(json.loads(x)) | {"overrides": sorted(overrides)}
                   for x in out.read_text().splitlines()]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print("RDMA WRITE RTL (host a) -> model (host b), back to back per size; cycles per "
              "data packet on m_axis_tx\n(first to last frame start) against the ideal "
              "ceil(frame bytes / lanes); PCIe: the payload Gb/s the DMA link's read\n"
              "completions allow (WQE and payload reads); in-msg / between: the mean gap "
              "within a message / from a\nmessage's last frame to the next's first; 1st "
              "frame: after the posts")
        for r in results:
            print_table(r)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
