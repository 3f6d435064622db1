"""A device that lacks a transport or atomics says so and refuses them as a real one does
(DevCap.NO_UD / NO_UC / NO_ATOMICS; the ERNIC profile is RC only, without atomics, as its
product guide says): UD and UC QPs are EOPNOTSUPP at create time (QP1, the CM's, stays),
atomic_cap is NONE, an atomic WR is EINVAL at post time, an atomic request that reaches it
is NAKed as an invalid request."""

from __future__ import annotations

import errno
from dataclasses import replace

import pytest
from nicsim.driver import enums as e
from nicsim.driver.user.errors import PyverbsRDMAError
from nicsim.driver.user.verbs import SGE, QPCap, SendWR

from nicsim.fabric.link import LinkConfig
from nicsim.nic.config import NicConfig
from nicsim.scenario.build import build_world
from nicsim.scenario.schema import validate
from nicsim.testing.rdma import connect, make_side, wait
from nicsim.world import World

RC_ONLY = NicConfig(ud=False, uc=False, atomics=False)


def _world(a: NicConfig, b: NicConfig) -> World:
    w = World()
    w.add_host("a", replace(a, mac="02:00:00:00:00:0a", ip="10.0.0.1"))
    w.add_host("b", replace(b, mac="02:00:00:00:00:0b", ip="10.0.0.2"))
    w.connect("a", "b", LinkConfig())
    w.boot()
    return w


@pytest.mark.parametrize("qp_type", [e.IBV_QPT_UD, e.IBV_QPT_UC])
def test_a_transport_the_device_lacks_is_eopnotsupp_at_create(qp_type: int) -> None:
    w = World.two_hosts(nic=RC_ONLY)
    with pytest.raises(PyverbsRDMAError) as ei:
        make_side(w, "a", qp_type=qp_type)
    assert ei.value.error_code == errno.EOPNOTSUPP
    assert "not supported by this device" in str(ei.value)
    make_side(w, "a")  # RC is there


def test_without_atomics_atomic_cap_is_none_and_an_atomic_wr_is_einval() -> None:
    w = World.two_hosts(nic=RC_ONLY)
    a, b = make_side(w, "a"), make_side(w, "b")
    connect(a, b)
    connect(b, a)
    assert a.ctx.query_device().atomic_caps == e.IBV_ATOMIC_NONE
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1,
                sg=[SGE(a.mr.buf, 8, a.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_atomic(b.mr.rkey, b.mr.buf, 1, 0)
    with pytest.raises(PyverbsRDMAError) as ei:
        a.qp.post_send(wr)
    assert ei.value.error_code == errno.EINVAL


def test_an_atomic_reaching_a_device_without_them_is_naked() -> None:
    w = _world(NicConfig(), RC_ONLY)  # a has atomics, b has none
    a, b = make_side(w, "a"), make_side(w, "b")
    connect(a, b)
    connect(b, a)
    b.mr.write(b"\x05" + bytes(7), 8)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1,
                sg=[SGE(a.mr.buf, 8, a.mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_atomic(b.mr.rkey, b.mr.buf, 1, 0)
    a.qp.post_send(wr)
    (wc,) = wait(a)
    assert wc.status == e.IBV_WC_REM_INV_REQ_ERR
    assert b.mr.read(8) == b"\x05" + bytes(7)  # untouched


def test_the_ernic_profile_is_rc_only_without_atomics_and_keeps_qp1() -> None:
    """(The CM's QP1, a UD QP, is made when the kernel boots: the world would not boot
    without it.)"""
    sc = validate({"name": "t", "pcap": None, "ops": [{"op": "write"}],
                   "profile": "ernic-100g"}, "test")
    w = build_world(sc, None, 64 << 20)
    assert w.nics["a"].cfg.max_qp == 2048
    cap = QPCap(16, 16, 1, 1, 0)  # (no inline data on ERNIC)
    with pytest.raises(PyverbsRDMAError) as ei:
        make_side(w, "a", cap=cap, qp_type=e.IBV_QPT_UD)
    assert ei.value.error_code == errno.EOPNOTSUPP
    a = make_side(w, "a", cap=cap)
    assert a.ctx.query_device().atomic_caps == e.IBV_ATOMIC_NONE
