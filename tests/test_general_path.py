"""The fast paths against the general path (nicsim.sim.paths): a corpus run both ways must
give the same memory, completions, counters and pcaps, byte for byte. Only the number of
events differs (that is what the fast paths save).

The corpus: every example scenario, the default scenario clean and under link faults (in
`nicsim run`, so the JSON result and every capture are compared), hostile frames aimed at
live QPs (every wire opcode, valid ICRC, damaged and random bytes), a mix of every RC
operation at each path MTU from 256 to 4096, and a UD exchange.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from nicsim.driver import enums as e

from nicsim.hwif import Cqe
from nicsim.sim.paths import general_path
from nicsim.testing.fuzz_frames import builder_to, fuzz_frame, revive, victims
from nicsim.testing.rdma import connect, make_side
from nicsim.testing.traffic_mix import run_mix
from nicsim.testing.ud import Side as UdSide
from nicsim.world import World

ROOT = Path(__file__).resolve().parents[1]
# Every example scenario (load-sweep.yaml is a sweep of websearch.yaml's scenario).
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.yaml") if p.stem != "load-sweep")
# Fields that count the model's work or the machine's time, not what the model computes.
NOT_RESULTS = {"events", "events_per_s", "wall_s", "wall_ns", "wall_time_s", "packets_per_s",
               "rate"}
RUNS: dict[str, list[str]] = {
    "default": [],
    "faulty": ["--loss", "0.02", "--corrupt", "0.01", "--duplicate", "0.01", "--reorder",
               "0.02"],
    **{p.stem: [str(p)] for p in EXAMPLES},
}
# The WebSearch example's 2,000 flows take ~12 s a way; 150 flows exercise the same paths.
SMALLER = {"websearch": ["--set", "flows[0].count=150"]}


def _scrub(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _scrub(v) for k, v in x.items() if k not in NOT_RESULTS}
    if isinstance(x, list):
        return [_scrub(v) for v in x]
    return x


def _cli_run(name: str, tmp: Path, general: bool) -> tuple[int, Any, dict[str, str]]:
    out = tmp / ("general" if general else "fast")
    out.mkdir()
    env = {**os.environ, "NICSIM_GENERAL_PATH": "1" if general else "0"}
    args = [sys.executable, "-m", "nicsim", "run", *RUNS[name], *SMALLER.get(name, []),
            "--json", "--quiet", "--check", "--pcap", "run.pcap"]  # (relative: the same in
    # both JSONs; --check: every example also holds to physics, nicsim.checks.physics)
    r = subprocess.run(args, capture_output=True, text=True, env=env, cwd=out, timeout=600)
    # (A run whose WRs fail exits 1 with its result, as the PFC storm's victims do; one that
    # breaks physics exits 3.)
    assert r.returncode in (0, 1) and r.stdout.startswith("{"), r.stderr[-2000:]
    pcaps = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.glob("*.pcap")}
    return r.returncode, _scrub(json.loads(r.stdout)), pcaps


@pytest.mark.parametrize("name", list(RUNS))
def test_scenario_runs_are_the_same_both_ways(name: str, tmp_path: Path) -> None:
    fast = _cli_run(name, tmp_path, general=False)
    slow = _cli_run(name, tmp_path, general=True)
    assert fast[2], "no capture written"
    assert fast == slow


# --- in-process jobs --------------------------------------------------------------------------


class Seen:
    """What a job leaves behind: every CQE its programs polled (with the time), the counters
    of every NIC, every MR's bytes and the capture."""

    def __init__(self) -> None:
        self.cqes: list[tuple[float, Cqe]] = []
        self.mrs: list[Any] = []
        self.world: World | None = None

    def watch(self, w: World, *sides: Any) -> None:
        self.world = w
        for s in sides:
            s.cq._p.on_cqe = lambda c, env=w.env: self.cqes.append((env.now, c))
            self.mrs.append(s.mr)

    def result(self, pcap: Path) -> tuple:
        w = self.world
        assert w is not None
        w.close()
        return (self.cqes, {n: nic.counters() for n, nic in w.nics.items()},
                [hashlib.sha256(m.read(m.length)).hexdigest() for m in self.mrs],
                w.env.now, pcap.read_bytes())


def _both_ways(job: Callable[[Path, Seen], None], tmp: Path) -> None:
    out = []
    for general in (False, True):
        seen = Seen()
        pcap = tmp / f"{general}.pcap"
        with general_path(general):
            job(pcap, seen)
        out.append(seen.result(pcap))
    fast, slow = out
    assert fast[0], "no completion polled"
    for what, a, b in zip(("completions", "counters", "memory", "end time", "pcap"), fast, slow,
                          strict=True):
        assert a == b, f"{what} differ"


@pytest.mark.parametrize("mtu", [e.IBV_MTU_256, e.IBV_MTU_512, e.IBV_MTU_1024, e.IBV_MTU_2048,
                                 e.IBV_MTU_4096])
def test_every_rc_operation_at_every_mtu_is_the_same_both_ways(mtu: int, tmp_path: Path) -> None:
    def job(pcap: Path, seen: Seen) -> None:
        w = World.two_hosts(seed=3, pcap=str(pcap))
        pairs = []
        for _ in range(2):
            a, b = make_side(w, "a", 1 << 18), make_side(w, "b", 1 << 18)
            connect(a, b, mtu)
            connect(b, a, mtu)
            pairs.append((a, b))
            seen.watch(w, a, b)
        run_mix(w, pairs, 40, seed=mtu, max_size=9000)

    _both_ways(job, tmp_path)


def test_ud_datagrams_are_the_same_both_ways(tmp_path: Path) -> None:
    def job(pcap: Path, seen: Seen) -> None:
        w = World.two_hosts(seed=4, pcap=str(pcap))
        a, b = UdSide(w, "a"), UdSide(w, "b")
        seen.watch(w, a, b)
        for i in range(8):
            b.recv(i, offset=2048 * i)
        for i in range(8):
            a.send(b, bytes([i]) * (64 + 100 * i), imm=i if i % 2 else None, wr_id=i)
        assert len(b.wait(8)) == 8

    _both_ways(job, tmp_path)


def test_hostile_frames_are_the_same_both_ways(tmp_path: Path) -> None:
    """Valid-ICRC frames of every opcode with random fields, damaged frames and random bytes,
    at the responder and the requester of a live pair (nicsim.testing.fuzz_frames)."""

    def job(pcap: Path, seen: Seen) -> None:
        w, a, b, a2, b2, canary, nb, bld = victims()
        seen.watch(w, a, b, a2, b2)
        seen.mrs.append(canary)
        rng = random.Random(7)
        qpns = [b.qp.qp_num, b2.qp.qp_num + 1000]
        keys = [b.mr.rkey, canary.rkey, b.mr.rkey ^ 1]
        addrs = [b.mr.buf, canary.buf]
        na = w.nics["a"]
        to_a = builder_to(na.cfg.mac, nb.cfg.mac, bytes([10, 0, 0, 2]), bytes([10, 0, 0, 1]))
        for i in range(400):
            if i % 3:
                nb.receive(fuzz_frame(rng, bld, qpns, keys, addrs))
            else:
                na.receive(fuzz_frame(rng, to_a, [a.qp.qp_num], keys, addrs))
            if i % 50 == 49:
                w.hosts["a"].spend(50_000)
                revive(b, a)
                revive(a, b)
        w.hosts["a"].spend(200_000)
        run_mix(w, [(a2, b2)], 10, seed=1)
        pcap.write_bytes(b"")  # victims() has no capture: the frames were handed in

    _both_ways(job, tmp_path)


def test_the_switch_reads_the_environment() -> None:
    """NICSIM_GENERAL_PATH=1 turns the fast paths off in a new process: the NIC's receive
    fast path takes no packet of a bulk WRITE, which it takes most of otherwise."""
    code = ("from nicsim.testing.rdma import pair, rdma_write\n"
            "w, a, b = pair()\n"
            "rdma_write(a, b.mr.rkey, b.mr.buf, bytes(20000))\n"
            "print(sum(w.nics['b']._fast_rx.values()))\n")
    taken = []
    for flag in ("0", "1"):
        env = {**os.environ, "NICSIM_GENERAL_PATH": flag}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        taken.append(int(r.stdout))
    assert taken[0] > 0 and taken[1] == 0


@pytest.fixture(autouse=True)
def _no_leak() -> Iterator[None]:
    with general_path(False):
        yield
