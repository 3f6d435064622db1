"""Stage events (nicsim.sim.tracer): what a NIC tells an observer, in the model's own times,
without any of its methods being replaced."""

from __future__ import annotations

from nicsim.driver import enums as e
from nicsim.driver.user.verbs import QPAttr

from nicsim.hwif import CqeOpcode, CqeStatus
from nicsim.sim.tracer import Recorder, Stage
from nicsim.testing.rdma import Side, pair, rdma_write, settle
from nicsim.world import World


def _observed() -> tuple[World, Recorder, Recorder, Side, Side]:
    w, a, b = pair(mtu=e.IBV_MTU_1024)
    nic_stages = tuple(s for s in Stage if s is not Stage.FRAME_IN)
    ra = Recorder(w.nics["a"].watch(), lambda: w.env.now, nic_stages)
    rb = Recorder(w.nics["b"].watch(), lambda: w.env.now, nic_stages)
    return w, ra, rb, a, b


def test_a_write_emits_its_stages_in_order_with_its_psns() -> None:
    w, ra, rb, a, b = _observed()
    assert rdma_write(a, b.mr.rkey, b.mr.buf, bytes(range(256)) * 12) == CqeStatus.SUCCESS
    settle(w)
    qpn = a.qp.qp_num
    seen = [(s, args) for _t, s, args in ra.events]
    stages = [s for s, _ in seen]
    assert stages == [Stage.DOORBELL, Stage.WQE_FETCHED, Stage.TRANSLATED, Stage.CQE_WRITTEN]
    (_, (db_qpn, head)), (_, fetched), (_, started), (_, cqe) = seen
    assert (db_qpn, head) == (qpn, 1)
    assert fetched[:2] == (qpn, 0)
    idx, t, first, last, dest = started[1:]
    assert idx == 0 and (last - first) & 0xFFFFFF == 2  # 3072 bytes at MTU 1024: 3 packets
    assert dest == b.qp.qp_num
    assert fetched[2] <= t
    assert cqe[1:5] == (qpn, 0, CqeOpcode.RDMA_WRITE, CqeStatus.SUCCESS)
    # The responder saw the three packets of a's QP. (Its last write may land after a's CQE:
    # the ACK leaves once the write is posted to PCIe, which orders it.)
    placed = [(args, t) for t, s, args in rb.events if s is Stage.PLACED]
    assert [args[:2] for args, _ in placed] == [(qpn, (first + k) & 0xFFFFFF) for k in range(3)]
    assert t < placed[0][0][2] <= placed[-1][0][2]


def test_state_changes_and_commands_are_events_and_observing_stops() -> None:
    w, a, b = pair()
    nic = w.nics["a"]
    rec = Recorder(nic.watch(), lambda: w.env.now, (Stage.QP_STATE, Stage.COMMAND_DONE))
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_ERR), e.IBV_QP_STATE)
    states = [args for _t, s, args in rec.events if s is Stage.QP_STATE]
    assert states == [(a.qp.qp_num, "RTS", "ERR")]
    assert [args for _t, s, args in rec.events if s is Stage.COMMAND_DONE] == [("OK",)]
    t = nic.tracer
    nic.observe(None)
    n = len(rec.events)
    a.qp.modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
    assert len(rec.events) == n
    assert all(getattr(blk, "tracer", None) is None
               for blk in (nic.requester, nic.responder, nic.completer, nic.cq, nic.commands))
    nic.observe(t)  # (the test suite's physics checker watches through it too)
