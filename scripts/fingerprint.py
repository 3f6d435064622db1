"""Fingerprints of what nicsim computes, to show that a change of structure changed no result.

Runs a fixed set of jobs (the default scenario, the same under link faults, a fabric incast,
perftest's ib_write_bw and ib_send_lat, and a breakdown) and prints, for each, a SHA-256 of
its JSON output with the fields that measure the machine (wall time, events per second)
removed, and of every pcap it wrote. Run it before and after a refactoring: every line must
be the same.

    python scripts/fingerprint.py [--json] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Fields that depend on the machine, not on the simulation.
WALL = {"wall_s", "wall_ns", "wall_time_s", "events_per_s", "rate", "packets_per_s"}
JOBS: dict[str, list[str]] = {
    "default": ["run", "--json", "--pcap", "{tmp}/default.pcap"],
    "faults": ["run", "--json", "--pcap", "{tmp}/faults.pcap", "--loss", "0.02", "--corrupt",
               "0.01", "--duplicate", "0.01", "--reorder", "0.02"],
    "fabric": ["run", str(ROOT / "examples" / "incast.yaml"), "--json", "--pcap",
               "{tmp}/incast.pcap"],
    "breakdown": ["run", "--json", "--no-pcap", "--breakdown"],
    "write_bw": ["perftest", "ib_write_bw", "-s", "4096", "-n", "2000", "--report_gbits",
                 "--out_json", "--out_json_file={tmp}/write_bw.json"],
    "send_lat": ["perftest", "ib_send_lat", "-s", "8", "-n", "1000", "--out_json",
                 "--out_json_file={tmp}/send_lat.json"],
}


def _scrub(x: object) -> object:
    if isinstance(x, dict):
        return {k: _scrub(v) for k, v in x.items() if k not in WALL}
    if isinstance(x, list):
        return [_scrub(v) for v in x]
    return x


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def fingerprint(name: str, args: list[str]) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        argv = [a.replace("{tmp}", tmp) for a in args]
        p = subprocess.run([sys.executable, "-m", "nicsim.cli", *argv], cwd=tmp,
                           capture_output=True, text=True, timeout=3600)
        if p.returncode not in (0, 1):
            raise SystemExit(f"{name}: nicsim {' '.join(argv)} failed: {p.stderr.strip()}")
        out: dict[str, str] = {}
        jsons = sorted(Path(tmp).glob("*.json"))
        if jsons:
            for f in jsons:
                out[f.name] = _digest(json.dumps(_scrub(json.loads(f.read_text())),
                                                 sort_keys=True).encode())
        else:  # (paths name the temporary folder: the same name in every run)
            out["stdout"] = _digest(json.dumps(_scrub(json.loads(
                p.stdout.replace(tmp, "{tmp}"))), sort_keys=True).encode())
        for f in sorted(Path(tmp).glob("*.pcap")):
            out[f.name] = _digest(f.read_bytes())
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", nargs="*", choices=sorted(JOBS))
    a = ap.parse_args()
    got = {n: fingerprint(n, JOBS[n]) for n in (a.only or JOBS)}
    if a.json:
        print(json.dumps(got, indent=2))
    else:
        for n, parts in got.items():
            print(f"{n:<10} " + "  ".join(f"{k}={v}" for k, v in parts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
