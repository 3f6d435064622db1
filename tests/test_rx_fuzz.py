"""Any bytes at a port: dropped or NAKed, counted by reason, never an exception, never a
corrupted QP or buffer that the attacker had no right to touch."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from nicsim.driver import enums as e

from nicsim.testing.fuzz_frames import builder_to, fuzz_frame, revive, still_works, victims
from nicsim.wire import ParseError


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1))
@example(seed=59828)  # a malformed MAC Control frame: counted by the port, not a parse drop
def test_random_frames_never_escape(seed):
    w, a, b, a2, b2, canary, nb, bld = victims()
    rng = random.Random(seed)
    qpns = [b.qp.qp_num, b2.qp.qp_num + 1000]  # the victim, and a QPN that does not exist
    keys = [b.mr.rkey, canary.rkey, b.mr.rkey ^ 1]
    addrs = [b.mr.buf, canary.buf]
    na = w.nics["a"]
    to_a = builder_to(na.cfg.mac, nb.cfg.mac, bytes([10, 0, 0, 2]), bytes([10, 0, 0, 1]))
    for i in range(300):
        if i % 3:  # requests (and junk) at the responder, b
            nb.receive(fuzz_frame(rng, bld, qpns, keys, addrs))
        else:  # responses (and junk) at the requester, a: the completer
            na.receive(fuzz_frame(rng, to_a, [a.qp.qp_num], keys, addrs))
        if i % 50 == 49:
            w.hosts["a"].spend(50_000)
            revive(b, a)
            revive(a, b)
    w.hosts["a"].spend(200_000)  # let every NAK, ACK and READ response play out
    c, ca = nb.counters(), na.counters()
    assert c["rx.packets"] + ca["rx.packets"] >= 300
    # Every dropped frame is counted under a reason.
    reasons = {r.value for r in ParseError}
    for cs in (c, ca):
        assert all(k.split(".", 1)[1] in reasons for k, v in cs.items()
                   if k.startswith("rx_drop.") and v)
    assert sum(v for cs in (c, ca) for k, v in cs.items() if k.startswith("rx_drop.")) > 0
    still_works(w, a2, b2, canary)


@settings(max_examples=60, deadline=None)
@given(frame=st.binary(max_size=200))
def test_arbitrary_bytes_are_dropped(frame):
    w, a, b, a2, b2, canary, nb, bld = victims()
    nb.receive(frame)
    assert nb.counters()["rx.packets"] == 1
    w.hosts["a"].spend(10_000)
    assert b.qp.query()[0].qp_state == e.IBV_QPS_RTS
