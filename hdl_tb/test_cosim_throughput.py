"""The co-simulation throughput bench (hdl_tb/bench_cosim_throughput.py) runs and accounts for
its packets: two 3-packet RDMA WRITEs from the RTL to the model at path MTU 1024, whose frames
must be FIRST / MIDDLE / LAST with consecutive PSNs and the right payload lengths, complete
SUCCESS and land byte-exact (the bench asserts it). No timing is asserted: the figures are
benchmarks/hdl_cosim_throughput.py's. Also: the benchmark's arithmetic on a known frame trace.
"""

from __future__ import annotations

import json

import pytest

from nicsim.cosim.build import PARAMS_ENV
from nicsim.cosim.build import roce_nic_params as bench_params
from nicsim.testing.cosim_throughput import size_figures


def test_bench_runs_and_accounts(tmp_path):
    from hdl_tb.cocotb_run import roce_nic_sources, run

    params = bench_params(64)
    out = tmp_path / "cosim.jsonl"
    run("roce_nic", roce_nic_sources(), "bench_cosim_throughput", params,
        extra_env={PARAMS_ENV: json.dumps(params), "HDL_BENCH_OUT": str(out),
                   "BENCH_SIZES": "2100:2", "BENCH_MTU": "1024", "BENCH_CLK_NS": "4"})
    (line,) = [json.loads(x) for x in out.read_text().splitlines()]
    (g,) = line["groups"]
    assert [(f["payload"], f["message"]) for f in g["frames"]] == \
        [(1024, 0), (1024, 0), (52, 0), (1024, 1), (1024, 1), (52, 1)]
    starts = [f["start_ns"] for f in g["frames"]]
    assert starts == sorted(starts) and starts[0] > g["post_ns"]
    assert line["data_frames"] == 6 and line["dma"]["read_bytes"] >= 2 * 2100


def test_size_figures():
    # three frames of one message at 64-byte lanes: 100, 100 and 50 bytes, starting every
    # 4 cycles at 4 ns, then one more message 10 cycles later
    fr = [{"bytes": 100, "payload": 40, "message": 0, "start_ns": 0.0},
          {"bytes": 100, "payload": 40, "message": 0, "start_ns": 16.0},
          {"bytes": 50, "payload": 10, "message": 0, "start_ns": 32.0},
          {"bytes": 100, "payload": 40, "message": 1, "start_ns": 72.0}]
    g = {"size": 90, "messages": 2, "frames": fr, "post_ns": -100.0, "wall_s": 2.0,
         "rtl_wall_s": 1.0}
    r = size_figures(g, 64, 4.0)
    assert r["cycles_per_packet"] == pytest.approx(6.0)          # 18 cycles / 3 gaps
    assert r["ideal_cycles_per_packet"] == pytest.approx(5 / 3)   # 2 + 2 + 1 beats
    assert r["in_message_cycles_per_packet"] == pytest.approx(4.0)
    assert r["between_messages_cycles"] == pytest.approx(10.0)
    assert r["payload_gbps"] == pytest.approx(90 * 8 / 72.0)
    assert r["first_frame_after_post_ns"] == pytest.approx(100.0)
    assert "pcie_bound_gbps" not in r
    # the reads' completions: 300 bytes in 3 TLPs of 24 bytes' overhead at 2 bytes/ns = 186 ns
    r = size_figures(g | {"read_bytes": 300, "read_tlps": 3}, 64, 4.0, (2.0, 24))
    assert r["pcie_bound_gbps"] == pytest.approx(130 * 8 / 186.0)
