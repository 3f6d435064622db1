"""The simulation kernel (nicsim.sim): its entries and streams take the place in the event
order that a SimPy Timeout made at the same point would take, and no module but the kernel
reads or writes SimPy's internals."""

from __future__ import annotations

import ast
import subprocess
from collections import deque
from pathlib import Path

from nicsim.sim import Entry, Sim, Tick

ROOT = Path(__file__).resolve().parents[1]
PRIVATE = {"_now", "_queue", "_eid"}


def test_entries_fire_where_timeouts_would() -> None:
    """A Tick (reused, several times in the queue at once) and an Entry fire in the order of
    Timeouts made at the same points, ties at one instant included."""
    env = Sim()
    fired: list[str] = []

    def on_tick(t: Tick) -> None:
        t.rearm()
        fired.append(f"tick@{env.now:g}")

    tick = Tick(on_tick)

    def timeout(name: str, delay: float) -> None:
        env.timeout(delay).callbacks.append(lambda _e: fired.append(f"{name}@{env.now:g}"))

    def wake(name: str, delay: float) -> None:
        env.call_at(env.now + delay, lambda ev: fired.append(f"{ev.value}@{env.now:g}"), name)

    timeout("a", 5)
    env.at(env.now + 5, tick)
    wake("w", 5)
    timeout("b", 5)
    env.at(env.now + 5, tick)
    env.at(env.now + 2, tick)
    timeout("c", 2)
    env.run()
    assert fired == ["tick@2", "c@2", "a@5", "tick@5", "w@5", "b@5", "tick@5"]


def test_a_ticket_holds_a_place_in_the_order() -> None:
    env = Sim()
    fired: list[str] = []
    early = env.ticket()  # drawn before the Timeout below, scheduled after it
    env.timeout(3).callbacks.append(lambda _e: fired.append("timeout"))
    env.at_ticket(3, early, Entry(lambda _e: fired.append("ticket")))
    env.run()
    assert fired == ["ticket", "timeout"]


def test_a_stream_delivers_while_each_item_is_the_next_event() -> None:
    """Items of a stream are delivered in one go up to the first one that another event
    precedes, or past the horizon; the clock moves to each."""
    env = Sim()
    got: list[tuple[str, float]] = []
    q: deque = deque((t, env.ticket(), f"f{t:g}") for t in (1, 2, 3, 6))
    env.timeout(4).callbacks.append(lambda _e: None)  # an event between f3 and f6
    env.horizon = (10, True)
    left = env.deliver(q, lambda item: got.append((item[2], env.now)))
    assert got == [("f1", 1), ("f2", 2), ("f3", 3)]
    assert left == (6, q[0][1]) and len(q) == 1
    env.horizon = (5, True)
    got.clear()
    env.run(until=4.5)
    assert env.deliver(q, lambda item: got.append((item[2], env.now))) == (6, q[0][1])
    assert not got  # f6 is past the horizon


def test_advance_runs_to_a_time_and_counts_events() -> None:
    env = Sim()
    n0 = env.events_created()
    env.timeout(10)
    env.advance(25)
    assert env.now == 25 and env.events_created() >= n0 + 2


def _private_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [f"{path.relative_to(ROOT)}:{n.lineno} {n.attr}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr in PRIVATE]


def test_only_the_kernel_touches_simpy_internals() -> None:
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    bad = [use for f in files if not f.startswith("nicsim/sim/")
           for use in _private_uses(ROOT / f)]
    assert not bad, "SimPy's internals outside nicsim/sim: " + ", ".join(bad)
