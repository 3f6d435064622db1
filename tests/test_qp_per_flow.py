"""Flows on a QP each (`flows[i].qp_per_flow`, HPCC's ns-3 model) beside the pool of QPs per
host pair: every flow posted on a QP that carries nothing else, the plan counting exactly the
QPs the run uses, the report naming the model, and one line when the NIC has too few QPs."""

from __future__ import annotations

import pytest

from nicsim.scenario.plan import plan
from nicsim.scenario.runner import Runner
from nicsim.scenario.schema import ScenarioError, parse_scenario

SCENARIO = """
name: per-flow
pcap: null
flows:
  - {{cdf: websearch, load: 0.5, count: 60, qp_per_flow: {per_flow}}}
ops:
  - {{op: write, bytes: 65536, repeat: 20}}
"""


def scenario(per_flow: bool, extra: str = ""):  # noqa: ANN201
    return parse_scenario(SCENARIO.format(per_flow=str(per_flow).lower()) + extra)


def flow_wrs(r) -> list:  # noqa: ANN001
    return [w for w in r.wrs if r.groups[w.group].name == "flows[0]"]


def what(r) -> str:  # noqa: ANN001
    return next(g.what for g in r.groups if g.name == "flows[0]")


def test_each_flow_has_a_qp_of_its_own() -> None:
    sc = scenario(True)
    pl = plan(sc)
    r = Runner(sc).run()
    flows = flow_wrs(r)
    assert len(flows) == 60 and all(w.status == 0 for w in flows)
    conns = [w.conn for w in flows]
    assert len(set(map(id, conns))) == 60, "two flows shared a QP"
    others = {id(w.conn) for w in r.wrs if r.groups[w.group].name != "flows[0]"}
    assert others and not others & set(map(id, conns)), "a flow's QP carried other traffic"
    # The plan counted exactly the QPs the run used: its own beyond each pair's shared pool.
    for pair, n in pl.pools.items():
        mine = sum(1 for w in flows if (w.src, w.dst) == pair)
        assert n == pl.shared.get(pair, 0) + mine, (pair, n, pl.shared, mine)
    assert what(r).endswith("a QP per flow"), what(r)


def test_the_pool_shares_its_qps_among_flows() -> None:
    r = Runner(scenario(False)).run()
    flows = flow_wrs(r)
    assert len(flows) == 60 and all(w.status == 0 for w in flows)
    per_pair = {(w.src, w.dst) for w in flows}
    assert len({id(w.conn) for w in flows}) <= 8 * len(per_pair)  # the pool's 8 per pair
    assert what(r).endswith("pool of 8 QPs"), what(r)


def test_planning_draws_the_same_flows_each_time() -> None:
    a, b = plan(scenario(True)), plan(scenario(True))
    assert a.pools == b.pools and a.flow_base == b.flow_base


def test_too_few_qps_for_the_flows_is_one_line() -> None:
    with pytest.raises(ScenarioError) as e:
        plan(scenario(True, "nic: {max_qp: 32}\n"))
    msg = str(e.value)
    assert "\n" not in msg and "qp_per_flow" in msg and "nic.max_qp" in msg, msg


def test_a_billion_flows_stop_at_the_first_host_out_of_qps() -> None:
    """The plan stops drawing once a host is past its NIC's QPs: one line, at once."""
    sc = parse_scenario(SCENARIO.format(per_flow="true").replace("count: 60",
                                                                 "count: 1000000000"))
    with pytest.raises(ScenarioError) as e:
        plan(sc)
    msg = str(e.value)
    assert msg.startswith("flows[0]: host ") and "at least 65,535 QPs" in msg, msg

