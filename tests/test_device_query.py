"""Device, port, GID and P_Key queries: values from the NIC (QUERY_DEVICE, QUERY_PORT, the
DEV_ID register) and the driver's own limits; errors as libibverbs reports them."""

from __future__ import annotations

import errno

import pytest
from nicsim.driver import enums as e
from nicsim.driver.kernel.hw.objects import HwError
from nicsim.driver.kernel.query import GID_TABLE_LEN, guid_from_mac, width_speed
from nicsim.driver.user import verbs as v
from nicsim.driver.user.errors import PyverbsRDMAError, PyverbsUserError
from nicsim.driver.user.unsupported import SrqAttr, SrqInitAttr
from nicsim.driver.user.verbs import GID, Context

from nicsim.fabric.link import LinkConfig
from nicsim.hwif import CmdOpcode, DevFeature, device_commands
from nicsim.nic.config import NicConfig
from nicsim.world import World


def _ctx(w: World, host: str = "a") -> Context:
    return Context("nsnic0", host=w.hosts[host])


def test_device_attributes_come_from_the_device() -> None:
    w = World.two_hosts(nic=NicConfig(max_qp=4096, max_sge=8, max_cqe=1 << 12,
                                      max_qp_rd_atom=4))
    ctx = _ctx(w)
    a = ctx.query_device()
    assert (a.max_qp, a.max_sge, a.max_sge_rd, a.max_cqe, a.max_qp_rd_atom) == \
        (4096 - 0x11, 8, 8, 1 << 12, 4)
    assert a.vendor_id == 0x6E73 and a.vendor_part_id == 0x6E69 and a.hw_ver == 2
    assert a.node_guid == guid_from_mac("02:00:00:00:00:0a") == 0x000000FFFE00000A
    assert a.atomic_caps == e.IBV_ATOMIC_HCA and a.phys_port_cnt == 1
    assert a.device_cap_flags & e.IBV_DEVICE_RC_RNR_NAK_GEN
    assert a.max_mr_size >= w.hosts["a"].mem_size and a.page_size_cap == 4096
    assert a.max_pd > 0 and a.max_mr > 0 and a.max_pkeys == 1
    assert ctx.query_device_ex().orig_attr.max_qp == a.max_qp
    assert ctx.num_comp_vectors == 1
    assert "QUERY_DEVICE" in w.hosts["a"].kernel.devices["nsnic0"].hw.lim.command_log


def test_port_attributes_follow_the_link() -> None:
    w = World.two_hosts(link=LinkConfig(rate_gbps=25.0))
    p = _ctx(w).query_port(1)
    assert p.state == e.IBV_PORT_ACTIVE and p.phys_state == 5
    assert p.link_layer == e.IBV_LINK_LAYER_ETHERNET
    assert (p.active_width, p.active_speed) == (1, 32)  # 1x EDR: 25 Gb/s
    assert p.max_mtu == p.active_mtu == e.IBV_MTU_4096  # jumbo netdev (MTU 9000)
    assert p.gid_tbl_len == GID_TABLE_LEN and p.pkey_tbl_len == 1
    assert p.max_msg_sz == 1 << 31 and p.lid == 0
    log = w.hosts["a"].kernel.devices["nsnic0"].hw.lim.command_log
    assert log[-1] == CmdOpcode.QUERY_PORT.name


def test_unconnected_port_is_down() -> None:
    w = World(0)
    w.add_host("a", NicConfig())
    w.boot()
    p = _ctx(w).query_port(1)
    assert p.state == e.IBV_PORT_DOWN and p.phys_state == 2


_LANES = {1: 1, 2: 4, 16: 2}
_LANE_MBPS = {1: 2500, 2: 5000, 4: 10_000, 16: 14_000, 32: 25_000, 64: 50_000, 128: 100_000}


@pytest.mark.parametrize("rate", [10_000, 25_000, 40_000, 50_000, 100_000, 200_000, 400_000])
def test_width_and_speed_name_the_rate(rate: int) -> None:
    w, s = width_speed(rate)
    assert _LANES[w] * _LANE_MBPS[s] == rate
    assert width_speed(100_000) == (2, 32)  # 4x EDR, as 100 GbE RoCE ports report


def test_bad_port_is_einval() -> None:
    ctx = _ctx(World.two_hosts())
    for port in (0, 2):
        with pytest.raises(PyverbsRDMAError) as ei:
            ctx.query_port(port)
        assert ei.value.error_code == errno.EINVAL
        assert "Failed to query port" in str(ei.value) and "Invalid argument" in str(ei.value)


def test_gid_table() -> None:
    """The table a ConnectX port shows (show_gids): the link-local GID made from the MAC,
    then the IPv4-mapped address, each as RoCE v1 and v2; the rest of the table empty."""
    w = World.two_hosts()
    ctx = _ctx(w, "b")  # MAC 02:00:00:00:00:0b, 10.0.0.2
    ll, v4 = "fe80:0000:0000:0000:0000:00ff:fe00:000b", "0000:0000:0000:0000:0000:ffff:0a00:0002"
    v1, v2 = e.IBV_GID_TYPE_SYSFS_IB_ROCE_V1, e.IBV_GID_TYPE_SYSFS_ROCE_V2
    assert [(ctx.query_gid(1, i).gid, ctx.query_gid_type(1, i)) for i in range(4)] == \
        [(ll, v1), (ll, v2), (v4, v1), (v4, v2)]
    assert ctx.query_gid(1, 3) == GID("::ffff:10.0.0.2")
    assert ctx.query_gid(1, 4) == GID()  # an empty entry reads as zero
    ent = ctx.query_gid_ex(1, 3)
    assert ent.gid_type == e.IBV_GID_TYPE_ROCE_V2 and ent.gid_index == 3
    assert ent.gid_str() == v4
    assert ctx.query_gid_ex(1, 0).gid_type == e.IBV_GID_TYPE_ROCE_V1
    with pytest.raises(PyverbsRDMAError) as ei:
        ctx.query_gid_ex(1, 4)
    assert ei.value.error_code == errno.ENODATA
    with pytest.raises(PyverbsRDMAError) as ei:
        ctx.query_gid(1, GID_TABLE_LEN)
    assert ei.value.error_code == errno.EINVAL
    assert [g.gid_index for g in ctx.query_gid_table(4)] == [0, 1, 2, 3]
    with pytest.raises(PyverbsRDMAError) as ei:
        ctx.query_gid_table(3)
    assert ei.value.error_code == -errno.EINVAL  # ibv_query_gid_table returns -errno


def test_pkey_table() -> None:
    ctx = _ctx(World.two_hosts())
    assert ctx.query_pkey(1, 0) == 0xFFFF
    assert ctx.get_pkey_index(1, 0xFFFF) == 0
    with pytest.raises(PyverbsRDMAError) as ei:
        ctx.query_pkey(1, 1)
    assert ei.value.error_code == errno.EINVAL
    with pytest.raises(PyverbsRDMAError):
        ctx.get_pkey_index(1, 0x7FFF)


def test_a_closed_context_answers_nothing() -> None:
    ctx = _ctx(World.two_hosts())
    ctx.close()
    with pytest.raises(PyverbsUserError):
        ctx.query_port(1)


def test_comp_vector_out_of_range_is_einval() -> None:
    from nicsim.driver.user.verbs import CQ

    ctx = _ctx(World.two_hosts())
    with pytest.raises(PyverbsRDMAError) as ei:
        CQ(ctx, 8, None, None, 1)
    assert ei.value.error_code == errno.EINVAL


def test_device_without_event_queues_srqs_multicast_or_odp() -> None:
    """A device that reports no event queues, SRQs, multicast or ODP (DeviceCaps, FEATURES):
    ib_device_attr says so, each verb that needs one fails with EOPNOTSUPP (Linux's answer
    for an op the device lacks) without one command reaching the device, and the device
    answers those commands BAD_OPCODE when asked anyway."""
    w = World.two_hosts(nic=NicConfig(odp=False, max_eq=0, max_srq=0, multicast=False))
    ctx = _ctx(w)
    hw = w.hosts["a"].kernel.devices["nsnic0"].hw
    assert (hw.caps.max_eq, hw.caps.max_srq, hw.caps.flags) == (0, 0, 0)
    assert DevFeature.MULTICAST not in hw.features
    a = ctx.query_device()
    assert (a.max_srq, a.max_srq_wr, a.max_srq_sge) == (0, 0, 0)
    assert (a.max_mcast_grp, a.max_mcast_qp_attach, a.max_total_mcast_qp_attach) == (0, 0, 0)
    assert not a.device_cap_flags & e.IBV_DEVICE_SRQ_RESIZE
    assert ctx.query_device_ex().odp_caps.general_caps == 0
    pd = v.PD(ctx)
    cq = v.CQ(ctx, 8)
    ud = v.QP(pd, v.QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=v.QPCap(2, 2, 1, 1)))
    n = hw.lim.commands
    for verb in (lambda: v.CompChannel(ctx), ctx.get_async_event,
                 lambda: v.SRQ(pd, SrqInitAttr(SrqAttr(8, 1))),
                 lambda: ud.attach_mcast(GID("ff0e::5")),
                 lambda: v.MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_ON_DEMAND)):
        with pytest.raises(PyverbsRDMAError) as ex:
            verb()
        assert ex.value.error_code == errno.EOPNOTSUPP
    assert hw.lim.commands == n, hw.lim.command_log[n:]
    lacks = set(CmdOpcode) - device_commands(hw.caps, hw.features)
    assert {CmdOpcode.CREATE_EQ, CmdOpcode.CREATE_SRQ, CmdOpcode.RESIZE_SRQ,
            CmdOpcode.QUERY_ODP, CmdOpcode.ATTACH_MCAST} <= lacks
    assert CmdOpcode.RESIZE_CQ not in lacks
    for op in sorted(lacks):
        with pytest.raises(HwError) as hx:
            hw.cmd(op, bytes(64), mod=1)
        assert hx.value.errno == errno.EOPNOTSUPP and "BAD_OPCODE" in str(hx.value)
    # the full-featured default reports them all
    d = World.two_hosts().hosts["a"].kernel.devices["nsnic0"].hw
    assert device_commands(d.caps, d.features) == frozenset(CmdOpcode)
    assert d.caps.max_eq == 64 and d.caps.max_srq == 1 << 16
