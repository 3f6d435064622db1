"""`nicsim calibrate`: fit a profile's free parameters to perftest figures of real hardware.

    nicsim calibrate send_lat.txt write_lat.json write_bw.txt --base cx6-hdr100 \
        --out my-nic.yaml

The inputs are perftest's client output as printed, or its --out_json files
(nicsim.calibrate.inputs); each table row is a figure. The fit (nicsim.calibrate.fit)
changes a few parameters of the base profile (nicsim.calibrate.model: the PCIe latency, the
NIC's pipeline latency, the per-WQE cost, the CPU's post and poll costs where the base sets
them) to minimise the relative error of nicsim's perftest model against the figures, keeps
at the base's value what the figures cannot identify, reports each figure against the fit
and a leave-one-out prediction, and writes a profile holding only the fitted values
(nicsim.calibrate.command). docs/how-to/calibrate.md says what to measure.
"""

from __future__ import annotations

from nicsim.calibrate.command import calibrate, main

__all__ = ["calibrate", "main"]
