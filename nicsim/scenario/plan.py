"""Planning a run before anything is simulated: hosts named by the traffic exist, CDFs load,
each host pair's QP pool, and the memory every host registers for buffers. Every problem is
a ScenarioError naming the field, raised before the world is built."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nicsim.hwif import recv_wqe_stride, send_wqe_stride
from nicsim.scenario.buffers import PAGE, ceil_page
from nicsim.scenario.build import check, host_names, host_rate_gbps, nic_config
from nicsim.scenario.schema import FlowsSpec, PatternKind, Scenario, ScenarioError
from nicsim.workloads.cdf import Cdf, CdfError, load_cdf
from nicsim.workloads.flows import poisson_flows

SLOTS = 256  # buffers of a closed loop beyond its depth: WRs completed, waiting to be checked
MAX_REGISTERED = 4 << 30  # what the NIC's 2^20 MTT entries of 4 KiB pages map
KERNEL_MEM = 16 << 20  # per host: kernel, tables, queues of a small run


@dataclass
class Plan:
    hosts: list[str]
    groups: list[tuple[str, str]]  # (name, what) of each ops line, stream, pattern, flows
    pools: dict[tuple[str, str], int]  # QPs per (requester, responder) pair
    arena: dict[str, int]  # bytes of buffers each host registers
    cdfs: dict[int, Cdf] = field(default_factory=dict)  # by flows index
    mem_size: int = 0
    # Of each pair's pool, the first `shared` QPs take traffic without a QP of its own (the
    # least loaded); after them, each qp_per_flow entry's own QPs, from flow_base[i][pair].
    shared: dict[tuple[str, str], int] = field(default_factory=dict)
    flow_base: dict[int, dict[tuple[str, str], int]] = field(default_factory=dict)

    @property
    def qps(self) -> int:
        return sum(self.pools.values())


def flow_rng(seed: int, i: int) -> np.random.Generator:
    """The random stream of flows entry `i` with qp_per_flow: the plan draws its flows to
    count their QPs, the run draws the same ones."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0xF10, i)))


def flow_rate_gbps(sc: Scenario, hosts: list[str]) -> float:
    """The rate a flows entry's `load` is a fraction of: its slowest host's link."""
    return min(host_rate_gbps(sc, h) for h in hosts)


def flows_per_pair(sc: Scenario, i: int, f: FlowsSpec, hosts: list[str], cdf: Cdf
                   ) -> dict[tuple[str, str], int]:
    """How many of flows entry `i`'s flows each (src, dst) pair has (qp_per_flow); a
    ScenarioError as soon as a host has more than its NIC's QPs (not after a billion draws)."""
    n: dict[tuple[str, str], int] = {}
    per_host = dict.fromkeys(hosts, 0)
    room = _qp_room(sc)
    for fl in poisson_flows(cdf, hosts, f.load, flow_rate_gbps(sc, hosts),
                            flow_rng(sc.seed, i), f.dst, f.count,
                            f.duration_us * 1000.0 if f.duration_us is not None else None):
        n[(fl.src, fl.dst)] = n.get((fl.src, fl.dst), 0) + 1
        for h in (fl.src, fl.dst):
            per_host[h] += 1
            if per_host[h] > room:
                raise _too_many_qps(f"flows[{i}]", h, per_host[h], room)
    return n


def _qp_room(sc: Scenario) -> int:
    """QPs a host's NIC hands out (QPNs 0 and 1 are not)."""
    return nic_config(sc).max_qp - 2


def _too_many_qps(where: str, host: str, n: int, room: int) -> ScenarioError:
    more = "at least " if where != "flows" else ""
    return ScenarioError(
        f"{where}: host {host} needs {more}{n:,} QPs (qp_per_flow: one per flow) and its NIC "
        f"has {room:,} (nic.max_qp); fewer flows, or qp_per_flow: false")


def _check_host(hosts: list[str], name: str | None, where: str) -> None:
    if name is not None and name not in hosts:
        raise ScenarioError(f"{where}: no host {name!r} (hosts: {', '.join(hosts)})")


def _region(offset: int, n: int) -> int:
    return max(PAGE, ceil_page(offset + n))


def plan(sc: Scenario, base: Path | None = None) -> Plan:
    check(sc)
    hosts = host_names(sc)
    first, second = hosts[0], hosts[1]
    pools: dict[tuple[str, str], int] = {}
    arena = dict.fromkeys(hosts, 0)
    groups: list[tuple[str, str]] = []
    cdfs: dict[int, Cdf] = {}
    own: dict[int, dict[tuple[str, str], int]] = {}  # qp_per_flow entries' flows per pair

    def pool(src: str, dst: str, n: int) -> None:
        pools[(src, dst)] = max(pools.get((src, dst), 0), n, sc.qps_per_pair)

    def need(host: str, n: int, where: str) -> None:
        arena[host] += n
        if arena[host] > MAX_REGISTERED:
            raise ScenarioError(
                f"{where}: the traffic so far needs {arena[host] >> 20:,} MiB of registered "
                f"memory on host {host} (bytes x min(repeat, depth + {SLOTS}) buffers); the "
                f"NIC maps at most {MAX_REGISTERED >> 20:,} MiB (2^20 MTT entries of 4 KiB)")

    for i, o in enumerate(sc.ops):
        where = f"ops[{i}]"
        _check_host(hosts, o.src, f"{where}.src")
        _check_host(hosts, o.dst, f"{where}.dst")
        src, dst = o.src or first, o.dst or second
        if src == dst:
            raise ScenarioError(f"{where}: src and dst are both {src!r}")
        pool(src, dst, o.qp + 1)
        slots = min(o.repeat, sc.depth + SLOTS)
        need(src, slots * _region(o.local_offset, o.bytes), where)
        need(dst, slots * _region(o.remote_offset, o.bytes), where)
        groups.append((where, f"{o.op.value} {o.bytes} B" + (f" x {o.repeat}" if o.repeat > 1
                                                              else "")))
    for i, s in enumerate(sc.streams):
        where = f"streams[{i}]"
        _check_host(hosts, s.src, f"{where}.src")
        _check_host(hosts, s.dst, f"{where}.dst")
        src, dst = s.src or first, s.dst or second
        if src == dst:
            raise ScenarioError(f"{where}: src and dst are both {src!r}")
        pool(src, dst, s.qps)
        slots = s.qps * (s.depth + SLOTS)
        if s.count is not None:
            slots = min(slots, s.qps * s.count)
        need(src, slots * _region(0, s.bytes), where)
        need(dst, slots * _region(0, s.bytes), where)
        bound = f"{s.count:,} each" if s.count is not None else f"for {s.duration_us:g} us"
        groups.append((where, f"{s.op.value} {s.bytes} B, {s.qps} QP(s), depth {s.depth}, "
                              f"{bound}"))
    for i, p in enumerate(sc.patterns):
        where = f"patterns[{i}]"
        ph = p.hosts or hosts
        for j, h in enumerate(ph):
            _check_host(hosts, h, f"{where}.hosts[{j}]")
        _check_host(hosts, p.dst, f"{where}.dst")
        if p.kind is PatternKind.INCAST:
            dst = p.dst or ph[0]
            pairs = [(h, dst) for h in ph if h != dst]
            if not pairs:
                raise ScenarioError(f"{where}: an incast needs a host other than {dst!r}")
        else:
            pairs = [(s, d) for s in ph for d in ph if s != d]
        per_host: dict[str, int] = {}
        for s, d in pairs:
            pool(s, d, 1)
            per_host[s] = per_host.get(s, 0) + 1
            per_host[d] = per_host.get(d, 0) + 1
        # Two rounds' buffers: a round's may still wait to be checked when the next starts.
        for h, k in per_host.items():
            need(h, 2 * k * _region(0, p.bytes), where)
        groups.append((where, f"{p.kind.value} {p.op.value} {p.bytes} B, {p.rounds} round(s)"))
    for i, f in enumerate(sc.flows):
        where = f"flows[{i}]"
        fh = f.hosts or hosts
        for j, h in enumerate(fh):
            _check_host(hosts, h, f"{where}.hosts[{j}]")
        _check_host(hosts, f.dst, f"{where}.dst")
        if f.dst is not None and not any(h != f.dst for h in fh):
            raise ScenarioError(f"{where}: no host other than dst {f.dst!r} to send")
        try:
            cdf = cdfs[i] = load_cdf(f.cdf, base)
        except CdfError as e:
            raise ScenarioError(f"{where}.cdf: {e}") from None
        pairs = [(s, d) for s in fh for d in fh if s != d and (f.dst is None or d == f.dst)]
        if f.qp_per_flow:
            own[i] = flows_per_pair(sc, i, f, fh, cdf)
        else:
            for s, d in pairs:
                pool(s, d, f.qps)
        # Flows in flight at once are not known in advance: room for a few of the largest
        # and then some (a flow waits for room, and the report says so; host.buffer_mib).
        for h in {x for pr in pairs for x in pr}:
            need(h, (64 << 20) + 4 * ceil_page(cdf.max), where)
        bound = f"{f.count:,} flows" if f.count is not None else f"for {f.duration_us:g} us"
        qps = "a QP per flow" if f.qp_per_flow else f"pool of {f.qps} QPs"
        groups.append((where, f"{cdf.name} {f.op.value} at load {f.load:g}, {bound}, {qps}"))
    for i, st in enumerate(sc.pfc_storms):
        _check_host(hosts, st.host, f"pfc_storms[{i}].host")
    if sc.host.buffer_mib is not None:
        for h in arena:
            if arena[h]:
                arena[h] = sc.host.buffer_mib << 20
    pl = Plan(hosts, groups, pools, arena, cdfs, shared=dict(pools))
    for i, per_pair in own.items():
        base: dict[tuple[str, str], int] = {}
        for pair, n in per_pair.items():
            base[pair] = pools.get(pair, 0)
            pools[pair] = base[pair] + n
        pl.flow_base[i] = base
    _check_qps(sc, pl)
    pl.mem_size = _mem_size(sc, pl)
    return pl


def _check_qps(sc: Scenario, pl: Plan) -> None:
    """Each host's QPs (one per connection it is an end of) fit its NIC's QP numbers."""
    room = _qp_room(sc)
    for h in pl.hosts:
        n = sum(k for (s, d), k in pl.pools.items() if h in (s, d))
        if n > room:
            raise _too_many_qps("flows", h, n, room)


def _rings(sc: Scenario, pl: Plan, host: str) -> int:
    """Memory of a host's queues: its QPs' rings and its CQs."""
    q = sc.qp
    per_qp = ceil_page(q.max_send_wr * send_wqe_stride(q.max_send_sge, q.max_inline_data)) + \
        ceil_page(q.max_recv_wr * recv_wqe_stride(q.max_recv_sge)) + 2 * PAGE
    n = sum(k for (s, d), k in pl.pools.items() if host in (s, d))
    cq = 2 * ceil_page(cq_size(sc, pl, host) * 32)
    return n * per_qp + cq


def cq_size(sc: Scenario, pl: Plan, host: str) -> int:
    """Entries of each CQ of a host: room for every WR its QPs can have outstanding."""
    n = sum(k for (s, d), k in pl.pools.items() if host in (s, d))
    want = n * max(sc.qp.max_send_wr, sc.qp.max_recv_wr) + 64
    return min(1 << 20, 1 << (want - 1).bit_length())


def _mem_size(sc: Scenario, pl: Plan) -> int:
    need = max(pl.arena[h] + _rings(sc, pl, h) for h in pl.hosts) + KERNEL_MEM
    if sc.host.mem_mib:
        have = sc.host.mem_mib << 20
        if need > have:
            raise ScenarioError(
                f"host.mem_mib: {sc.host.mem_mib:,} MiB is less than the "
                f"{(need + (1 << 20) - 1) >> 20:,} MiB the traffic needs (its buffers, queues "
                f"and 16 MiB for the kernel)")
        return have
    return max(64 << 20, 1 << (need - 1).bit_length())
