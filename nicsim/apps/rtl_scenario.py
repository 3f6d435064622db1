"""`nicsim run --rtl a` in the simulator: the scenario's world with host a's NIC the RTL
(roce_nic, nicsim.cosim.cosim_world) and host b's the model, run by nicsim's scenario Runner
in the driver thread while cocotb runs the RTL (nicsim.cosim.clock couples the two).

`python -m nicsim.apps.rtl_scenario` (what nicsim.scenario.rtl starts) builds roce_nic and
runs the cocotb test below; the job (scenario file, overrides, pcap, where the result goes)
comes in the environment (nicsim.scenario.rtl.ENV_SCENARIO) and the result goes back as JSON: the
same text and JSON reports `nicsim run` prints; with `--out DIR` the same result files.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import cocotb
from cocotb.task import bridge

from nicsim.cosim.build import PARAMS_ENV, RtlRunError, roce_nic_params, roce_nic_sources, run
from nicsim.cosim.rtl_nic import rtl_counters
from nicsim.scenario.rtl import ENV_SCENARIO


def _write(path: str, result: dict) -> None:
    Path(path).write_text(json.dumps(result))


@cocotb.test()
async def run_scenario(dut) -> None:  # noqa: ANN001
    from nicsim.cosim import boot_rtl_host, cosim_world
    from nicsim.results.report import json_report, text_report
    from nicsim.scenario import build
    from nicsim.scenario.load import load
    from nicsim.scenario.runner import Runner
    from nicsim.scenario.schema import ScenarioError

    job = json.loads(os.environ[ENV_SCENARIO])
    try:
        sc, _source = load(job["source"], [tuple(o) for o in job["overrides"]])
        base = Path(job["base"]) if job["base"] else None
        spec = build.shaped(sc)
        nic = build.nic_config(sc)
        w, rtl = cosim_world(dut, seed=sc.seed, nic=nic, link=spec.host_link,
                             faults=spec.faults, pcie=nic.pcie, pcap=job["pcap"],
                             mem_size=Runner(sc, base=base).memory(),
                             costs=build.cpu_costs(sc))
    except ScenarioError as e:
        _write(job["result"], {"error": str(e)})
        return
    await rtl.reset()
    rtl.clock.couple(w.env)

    def world(_sc, _pcap, _mem):  # noqa: ANN001, ANN202 - the Runner's world factory
        boot_rtl_host(w)  # its probe is MMIO to the RTL: from the driver thread
        return w

    out = Path(job["out"]) if job.get("out") else None
    runner = Runner(sc, job["pcap"], out, None, base, world_factory=world)

    def go() -> dict | object:
        try:
            res = runner.run()
            if out is not None:
                from nicsim.results import output

                res.files = output.write(res, out)
            return res
        except ScenarioError as e:
            return {"error": str(e)}
        except OSError as e:
            return {"error": f"writing {e.filename or ''}: {e.strerror or e}"}
        except Exception:  # noqa: BLE001 - reported to the user with the log's path
            traceback.print_exc()
            return {"error": "the run failed inside the co-simulation"}

    res = await bridge(go)()
    if isinstance(res, dict):
        _write(job["result"], res)
        return
    # The RTL's own counters (roce_nic's cnt_* outputs), read here on the simulator's side.
    counters = rtl_counters(dut)
    text = text_report(res) + "\nRTL counters (host a): " + ", ".join(
        f"{k} {v:,}" for k, v in counters.items())
    report = json_report(res)
    report["rtl"] = {"counters": counters, "late": rtl.clock.late,
                     "cycles": int(rtl.clock.now() / rtl.clk_ns)}
    _write(job["result"], {"text": text, "json": report, "ok": res.ok})


def main() -> int:
    job = json.loads(os.environ[ENV_SCENARIO])
    params = roce_nic_params(job["width"])
    try:
        failed = run("roce_nic", roce_nic_sources(), "nicsim.apps.rtl_scenario", params,
                     sim=job["sim"], extra_env={PARAMS_ENV: json.dumps(params),
                                                ENV_SCENARIO: os.environ[ENV_SCENARIO]},
                     build_dir=Path(job["build"]))
    except RtlRunError as e:
        print(e, file=sys.stderr)
        return 1
    return 1 if failed else 0  # (a failed cocotb test: its traceback is in the log)


if __name__ == "__main__":
    sys.exit(main())
