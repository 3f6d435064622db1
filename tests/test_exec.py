"""`nicsim exec`: an unmodified pyverbs program runs on the simulated world; `rdma`, `ip` and
sysfs answers agree with it; a feature nsnic lacks answers EOPNOTSUPP."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from scapy.utils import RawPcapReader

from nicsim.fabric.pcap import check_pcap
from nicsim.hwif import link_local_gid

# A pyverbs program as rdma-core's tests write them: an RC pair on the first device, a
# WRITE between them (loopback), then a check of the bytes and the completion.
PROGRAM = """
import errno, json, sys
import pyverbs.device as d
from pyverbs.addr import AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.libibverbs_enums import ibv_access_flags as a, ibv_qp_type, ibv_wr_opcode
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, SendWR

name = d.get_device_list()[0].name.decode()
ctx = d.Context(name=name)
port = ctx.query_port(1)
pd, cq = PD(ctx), CQ(ctx, 100, None, None, 0)
acc = a.IBV_ACCESS_LOCAL_WRITE | a.IBV_ACCESS_REMOTE_WRITE
init = QPAttr(port_num=1)
init.qp_access_flags = acc
qps = [QP(pd, QPInitAttr(qp_type=ibv_qp_type.IBV_QPT_RC, scq=cq, rcq=cq,
                         cap=QPCap(max_recv_wr=10)), init) for _ in range(2)]
gid = ctx.query_gid(1, 0)
for x, y in zip(qps, reversed(qps)):
    attr = QPAttr(port_num=1)
    attr.qp_access_flags = acc
    attr.dest_qp_num, attr.max_dest_rd_atomic, attr.max_rd_atomic = y.qp_num, 1, 1
    attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
    attr.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=gid, sgid_index=0))
    x.to_rts(attr)
src, dst = MR(pd, 4096, acc), MR(pd, 4096, acc)
src.write(b"nicsim exec " * 100, 1200)
wr = SendWR(opcode=ibv_wr_opcode.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, 1200, src.lkey)])
wr.set_wr_rdma(dst.rkey, dst.buf)
qps[0].post_send(wr)
n, wcs = 0, []
while not n:
    n, wcs = cq.poll()
srq = SRQ(pd, SrqInitAttr(SrqAttr())).get_srq_num() > 0
try:
    d.DM(ctx, d.AllocDmAttr(4096))
    dm = "created"
except PyverbsRDMAError as e:
    dm = "EOPNOTSUPP" if e.error_code == errno.EOPNOTSUPP else e.error_code
print(json.dumps({"devices": [x.name.decode() for x in d.get_device_list()],
                  "state": port.state, "status": wcs[0].status,
                  "same": dst.read(1200, 0) == src.read(1200, 0), "srq": srq,
                  "dm": dm}))
ctx.close()
"""


def _exec(args: list[str], cwd: Path, **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nicsim.cli", "exec", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False, **kw)


def test_an_unmodified_pyverbs_program_runs(tmp_path: Path) -> None:
    prog = tmp_path / "app.py"
    prog.write_text(PROGRAM)
    # A directory named pyverbs next to the program (as at the top of an rdma-core
    # checkout) does not shadow nicsim's.
    (tmp_path / "pyverbs").mkdir()
    (tmp_path / "pyverbs" / "__init__.py").write_text("raise ImportError('the wrong one')\n")
    r = _exec(["--pcap", str(tmp_path / "caps"), "--", sys.executable, "-c",
               f"exec(open({str(prog)!r}).read())"], tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"devices": ["nsnic0", "nsnic1"], "state": 4, "status": 0, "same": True,
                   "srq": True, "dm": "EOPNOTSUPP"}
    (cap,) = [p for p in (tmp_path / "caps").iterdir() if p.name.endswith("-a.pcap")]
    frames = [bytes(f) for f, _ in RawPcapReader(str(cap))]
    assert len(frames) == 3 and not check_pcap(cap).bad  # 2 WRITE packets and an ACK
    # GID index 0 is the link-local RoCE v1 entry (as on a ConnectX port): GRH frames, the
    # GIDs made from nsnic0's MAC, looped back inside the NIC.
    ll = link_local_gid(frames[0][6:12])
    assert all(f[12:14] == b"\x89\x15" and f[22:38] == f[38:54] == ll for f in frames), \
        frames[0][:60].hex()


def test_rdma_ip_and_sysfs_agree_with_the_world(tmp_path: Path) -> None:
    r = _exec(["--hosts", "3", "--", "sh", "-c",
               "rdma link show -j; ip -j addr show eth2; "
               "cat /sys/class/infiniband/nsnic1/ports/1/gids/0 "
               "/sys/class/infiniband/nsnic1/ports/1/gids/3 "
               "/sys/class/infiniband/nsnic1/ports/1/gid_attrs/types/2 "
               "/sys/class/infiniband/nsnic1/ports/1/gid_attrs/types/3 "
               "/sys/class/infiniband/nsnic1/ports/1/gids/4 "
               "/sys/class/infiniband/nsnic2/ports/1/pkeys/0"], tmp_path)
    assert r.returncode == 0, r.stderr
    links, addrs, ll, gid, v1, v2, empty, pkey = r.stdout.strip().splitlines()
    assert [(x["ifname"], x["state"], x["netdev"]) for x in json.loads(links)] == \
        [("nsnic0", "ACTIVE", "eth0"), ("nsnic1", "ACTIVE", "eth1"), ("nsnic2", "ACTIVE", "eth2")]
    (a,) = json.loads(addrs)
    assert a["addr_info"][0]["local"] == "10.0.0.3" and a["address"] == "02:00:00:00:00:03"
    # The table a ConnectX port shows: link-local v1 and v2, then the IPv4 address v1 and v2.
    assert ll == "fe80:0000:0000:0000:0000:00ff:fe00:0002"
    assert gid == "0000:0000:0000:0000:0000:ffff:0a00:0002" and pkey == "0xffff"
    assert (v1, v2) == ("IB/RoCE v1", "RoCE v2")
    assert empty == "0000:0000:0000:0000:0000:0000:0000:0000"


def test_one_host_has_its_port_down(tmp_path: Path) -> None:
    r = _exec(["--hosts", "1", "--", "rdma", "link"], tmp_path)
    assert r.stdout.strip() == "link nsnic0/1 state DOWN physical_state POLLING netdev eth0"


def test_exit_status_and_bad_options(tmp_path: Path) -> None:
    assert _exec(["--", sys.executable, "-c", "raise SystemExit(7)"], tmp_path).returncode == 7
    r = _exec(["--world", "hosts=0", "--", "true"], tmp_path)
    assert r.returncode == 2 and "hosts: 0 is not between 1 and 64" in r.stderr
    r = _exec(["--world", "colour=red", "--", "true"], tmp_path)
    assert r.returncode == 2 and "colour: unknown key" in r.stderr
    assert _exec([], tmp_path).returncode == 2
    assert _exec(["--", "/nonexistent/cmd"], tmp_path).returncode == 127


def test_other_vendors_interfaces_say_this_is_not_their_device(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        from pyverbs.pyverbs_error import PyverbsUserError
        from pyverbs.providers.mlx5.mlx5dv import Mlx5Context, Mlx5DVContextAttr
        from pyverbs.providers.mlx5.mlx5_enums import mlx5dv_context_attr_flags as f
        import pyverbs.device as d
        try:
            Mlx5Context(Mlx5DVContextAttr(), name="nsnic0")
        except PyverbsUserError as e:
            print(e, int(f.MLX5DV_CONTEXT_FLAGS_DEVX), d.Context(name="nsnic0")
                  .query_device().vendor_id != 0x02c9)
    """)
    r = _exec(["--", sys.executable, "-c", code], tmp_path)
    assert r.stdout.strip() == "This is not an MLX5 device 1 True", r.stderr


def test_older_pyverbs_names_and_address_handle_limit(tmp_path: Path) -> None:
    """`import pyverbs.enums as e` (older pyverbs, most examples online) works, and the
    device says it takes address handles (max_ah was 0 although UD with AHs works)."""
    code = ("import pyverbs.enums as e\n"
            "from pyverbs.device import Context\n"
            "assert e.IBV_QPT_UD == 4 and e.IBV_WR_SEND == 2 and e.RDMA_PS_TCP == 0x106\n"
            "print(Context(name='nsnic0').query_device().max_ah)\n")
    r = _exec(["--", sys.executable, "-c", code], tmp_path)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) >= 1 << 16
