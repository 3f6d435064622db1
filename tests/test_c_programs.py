"""Debian's own C verbs programs under `nicsim exec` (nicsim's libibverbs.so.1 and the verbs
server, nicsim.exec.cserver): ibv_devices and ibv_devinfo show the simulated devices with
exactly the attributes nicsim's pyverbs reports; a verb not carried yet fails as on a
provider without it; without a server a program sees no device. (ibv_rc_pingpong, objects
and the data path: tests/test_c_pingpong.py.)"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from nicsim.exec import native
from nicsim.exec.cserver import DEVICE_ATTRS, PORT_ATTRS, SOCKET_ENV, Op, VerbsServer
from nicsim.exec.spec import WorldSpec
from nicsim.exec.world import build

if shutil.which("ibv_devinfo") is None or shutil.which("ibv_devices") is None:
    pytest.skip("ibverbs-utils is not installed (make tools installs it)",
                allow_module_level=True)

NSRPC_H = native.source_dir() / "nsrpc.h"

# What nicsim's pyverbs reports for every device, as a program under nicsim exec sees it.
PYVERBS = """
import json
import pyverbs.device as d
from pyverbs.pyverbs_error import PyverbsRDMAError

DEVICE = %r
PORT = %r
out = {}
for dev in d.get_device_list():
    ctx = d.Context(name=dev.name.decode())
    a, ax, p = ctx.query_device(), ctx.query_device_ex(), ctx.query_port(1)
    gids = []
    for i in range(p.gid_tbl_len):
        try:
            e = ctx.query_gid_ex(1, i)
        except PyverbsRDMAError:
            continue
        gids.append([i, e.gid_str(), e.gid_type])
    out[dev.name.decode()] = {
        "guid": dev.guid, "device": {f: getattr(a, f) for f in DEVICE},
        "device_cap_flags_ex": ax.device_cap_flags_ex,
        "num_comp_vectors": ctx.num_comp_vectors,
        "port": {f: getattr(p, f) for f in PORT}, "gids": gids}
    ctx.close()
print(json.dumps(out))
"""

# ibv_devinfo's name for a pyverbs attribute, where the two differ
DEVINFO_NAME = {"atomic_caps": "atomic_cap", "lid": "port_lid", "lmc": "port_lmc"}
DEVICE_FIELDS = ("fw_ver", "node_guid", "sys_image_guid", "vendor_id", "vendor_part_id",
                 "hw_ver", "phys_port_cnt", "max_mr_size", "page_size_cap", "max_qp",
                 "max_qp_wr", "device_cap_flags", "max_sge", "max_sge_rd", "max_cq", "max_cqe",
                 "max_mr", "max_pd", "max_qp_rd_atom", "max_ee_rd_atom", "max_res_rd_atom",
                 "max_qp_init_rd_atom", "max_ee_init_rd_atom", "atomic_caps", "max_ee",
                 "max_rdd", "max_mw", "max_raw_ipv6_qp", "max_raw_ethy_qp", "max_mcast_grp",
                 "max_mcast_qp_attach", "max_total_mcast_qp_attach", "max_ah", "max_fmr",
                 "max_srq", "max_srq_wr", "max_srq_sge", "max_pkeys", "local_ca_ack_delay")
PORT_FIELDS = ("state", "max_mtu", "active_mtu", "sm_lid", "lid", "lmc", "max_msg_sz",
               "port_cap_flags", "port_cap_flags2", "max_vl_num", "bad_pkey_cntr",
               "qkey_viol_cntr", "sm_sl", "pkey_tbl_len", "gid_tbl_len", "subnet_timeout",
               "init_type_reply", "active_width", "active_speed", "phys_state", "link_layer")


def _exec(args: list[str], cwd: Path, **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nicsim.cli", "exec", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False, **kw)


def _pyverbs(tmp_path: Path, *world: str) -> dict:
    prog = tmp_path / "attrs.py"
    prog.write_text(PYVERBS % (DEVICE_FIELDS, PORT_FIELDS))
    r = _exec([*world, "--", "python", str(prog)], tmp_path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _value(text: str) -> int | str:
    """An ibv_devinfo value as a number where it is one: 'PORT_ACTIVE (4)' -> 4,
    '0x80000000' -> 0x80000000, '0000:00ff:fe00:000a' (a GUID) -> 0xfffe00000a."""
    m = re.search(r"\((\d+)\)$", text)
    if m:
        return int(m.group(1))
    if re.fullmatch(r"[0-9a-f]{4}(:[0-9a-f]{4}){3}", text):
        return int(text.replace(":", ""), 16)
    if re.fullmatch(r"0x[0-9a-fA-F]+", text):
        return int(text, 16)
    if re.fullmatch(r"\d+", text):
        return int(text)
    return text


def _devinfo(out: str) -> dict[str, dict]:
    """ibv_devinfo's output by device: its `key: value` lines and its GIDs."""
    devs: dict[str, dict] = {}
    cur: dict = {}
    for line in out.splitlines():
        if line.startswith("hca_id:"):
            cur = devs.setdefault(line.split()[1], {"gids": []})
            continue
        m = re.match(r"\s+GID\[\s*(\d+)\]:\s+(\S+), (RoCE v[12])$", line)
        if m:
            cur["gids"].append((int(m.group(1)), m.group(2), m.group(3)))
            continue
        m = re.match(r"\s+(\w+):\s+(.+)$", line)
        if m and m.group(1) not in cur:
            cur[m.group(1)] = _value(m.group(2).strip())
    return devs


def test_ibv_devices_lists_each_device_with_its_node_guid(tmp_path: Path) -> None:
    for hosts, names in (("2", ["nsnic0", "nsnic1"]), ("3", ["nsnic0", "nsnic1", "nsnic2"])):
        py = _pyverbs(tmp_path, "--hosts", hosts)
        r = _exec(["--hosts", hosts, "--", "ibv_devices"], tmp_path)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].split() == ["device", "node", "GUID"]
        rows = [line.split() for line in lines[2:]]
        assert [row[0] for row in rows] == names == list(py)
        assert [int(row[1], 16) for row in rows] == [py[n]["guid"] for n in names]


def test_a_nicsim_directory_in_the_working_directory_is_not_the_package(tmp_path: Path) -> None:
    """Without XDG_RUNTIME_DIR the worlds live in /tmp/nicsim/worlds: run from /tmp, that
    directory is a namespace package `nicsim` ahead of the real one, and the library's
    sources must still be found (no traceback)."""
    (tmp_path / "nicsim" / "worlds").mkdir(parents=True)
    r = _exec(["--", "ibv_devices"], tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-800:]
    assert "nsnic0" in r.stdout


def test_ibv_devinfo_shows_what_pyverbs_reports(tmp_path: Path) -> None:
    py = _pyverbs(tmp_path)
    r = _exec(["--", "ibv_devinfo", "-v"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    shown = _devinfo(r.stdout)
    assert list(shown) == ["nsnic0", "nsnic1"]
    for name, want in py.items():
        got = shown[name]
        assert got["transport"] == 0  # InfiniBand (0): RoCE runs the IB transport
        for f in DEVICE_FIELDS:
            assert got[DEVINFO_NAME.get(f, f)] == want["device"][f], (name, f)
        assert got["node_guid"] == want["guid"]
        assert got["device_cap_flags_ex"] == want["device_cap_flags_ex"]
        assert got["num_comp_vectors"] == want["num_comp_vectors"]
        for f in PORT_FIELDS:
            value = got[DEVINFO_NAME.get(f, f)]
            if f == "link_layer":
                assert (value, want["port"][f]) == ("Ethernet", 2)
            else:
                assert value == want["port"][f], (name, f)
        assert got["state"] == 4  # PORT_ACTIVE: each port is cabled to its peer
        # The GID table: link-local then IPv4-mapped, each as RoCE v1 and v2 (v1 printed as
        # raw groups, v2 as an IPv6 address, as ibv_devinfo prints them)
        assert [(i, ipaddress.ip_address(g), t) for i, g, t in got["gids"]] == [
            (i, ipaddress.ip_address(g), f"RoCE v{t}") for i, g, t in want["gids"]]
        assert [t for _, _, t in got["gids"]] == ["RoCE v1", "RoCE v2"] * 2
    gids = [g for _, g, _ in shown["nsnic0"]["gids"]]
    assert gids[0].startswith("fe80:0000:0000:0000:") and gids[1].startswith("fe80::")
    assert gids[2].endswith("ffff:0a00:0001") and gids[3] == "::ffff:10.0.0.1"


def test_ibv_devinfo_names_one_device_and_one_port(tmp_path: Path) -> None:
    r = _exec(["--", "ibv_devinfo", "-d", "nsnic1", "-v"], tmp_path)
    assert r.returncode == 0, r.stderr
    shown = _devinfo(r.stdout)
    assert list(shown) == ["nsnic1"]
    assert shown["nsnic1"]["gids"][3][1] == "::ffff:10.0.0.2"
    r = _exec(["--", "ibv_devinfo", "-d", "nsnic9"], tmp_path)
    assert r.returncode == 255 and "IB device 'nsnic9' wasn't found" in r.stderr
    r = _exec(["--", "ibv_devinfo", "-i", "2"], tmp_path)  # one port per device
    assert r.returncode == 4 and "Invalid port requested for device" in r.stderr
    r = _exec(["--hosts", "3", "--", "ibv_devinfo", "-l"], tmp_path)
    assert r.stdout.split() == ["3", "HCAs", "found:", "nsnic0", "nsnic1", "nsnic2"]


def test_one_host_shows_its_port_down(tmp_path: Path) -> None:
    py = _pyverbs(tmp_path, "--hosts", "1")
    r = _exec(["--hosts", "1", "--", "ibv_devinfo"], tmp_path)
    assert r.returncode == 0, r.stderr
    shown = _devinfo(r.stdout)
    assert list(shown) == ["nsnic0"]
    assert shown["nsnic0"]["state"] == py["nsnic0"]["port"]["state"] == 1
    assert "PORT_DOWN (1)" in r.stdout


def _run_on(server: VerbsServer, *cmd: str) -> subprocess.CompletedProcess:
    lib, why = native.library()
    assert lib is not None, why
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(lib.parent),
           SOCKET_ENV: server.path}
    return subprocess.run(list(cmd), env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def test_a_device_without_roce_v1_shows_two_gids(tmp_path: Path) -> None:
    # rxe-25g's device (nicsim/profiles/rxe-25g.yaml: roce_v1 false) has RoCE v2 GIDs only
    r = _exec(["--profile", "rxe-25g", "--", "ibv_devinfo", "-v", "-d", "nsnic0"], tmp_path)
    assert r.returncode == 0, r.stderr
    gids = _devinfo(r.stdout)["nsnic0"]["gids"]
    assert [(i, t) for i, _, t in gids] == [(0, "RoCE v2"), (1, "RoCE v2")]
    assert gids[1][1] == "::ffff:10.0.0.1"


def test_a_verb_not_carried_yet_fails_as_on_a_provider_without_it(tmp_path: Path) -> None:
    # ibv_srq_pingpong opens the device, allocates its PD, MR and CQ, then cannot create its
    # SRQ (EOPNOTSUPP): it says so and exits 1, as on a device whose provider lacks SRQs;
    # nothing crashes.
    r = _exec(["--", "ibv_srq_pingpong", "-d", "nsnic0", "-g", "3"], tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", "Couldn't create SRQ\n")


def test_without_a_server_there_are_no_devices(tmp_path: Path) -> None:
    lib, why = native.library()
    assert lib is not None, why
    for sock in ({SOCKET_ENV: str(tmp_path / "none.sock")}, {}):
        env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(lib.parent), **sock}
        r = subprocess.run(["ibv_devices"], env=env, capture_output=True, text=True,
                           timeout=60, check=False)
        assert r.returncode == 0 and r.stderr == ""
        assert [line.split() for line in r.stdout.splitlines()] == [
            ["device", "node", "GUID"], ["------", "----------------"]]
        r = subprocess.run(["ibv_devinfo"], env=env, capture_output=True, text=True,
                           timeout=60, check=False)
        assert (r.returncode, r.stderr) == (255, "No IB devices found\n")


def _call(s: socket.socket, op: int, body: bytes) -> tuple[int, bytes]:
    s.sendall(struct.pack("=II", len(body), op) + body)
    n, status = struct.unpack("=Ii", s.recv(8, socket.MSG_WAITALL))
    return status, s.recv(n, socket.MSG_WAITALL) if n else b""


def test_the_server_answers_bad_requests_with_an_errno(tmp_path: Path) -> None:
    with VerbsServer(str(tmp_path / "verbs.sock"), lambda: build(WorldSpec())) as server:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(server.path)
            assert _call(s, Op.HELLO, struct.pack("=I", 1) + b"test")[0] == errno.EPROTO
            # (the answer names the server's pid: the library lets it reach its memory)
            assert _call(s, Op.HELLO, struct.pack("=I", 2) + b"test") == (
                0, struct.pack("=II", 2, os.getpid()))
            assert _call(s, 99, b"")[0] == errno.EOPNOTSUPP
            assert _call(s, Op.QUERY_PORT, b"\1")[0] == errno.EINVAL  # a short body
            assert _call(s, Op.QUERY_PORT, struct.pack("=II", 7, 1))[0] == errno.EBADF
            assert _call(s, Op.OPEN, b"nsnic7".ljust(64, b"\0"))[0] == errno.ENODEV
            status, body = _call(s, Op.OPEN, b"nsnic0".ljust(64, b"\0"))
            assert status == 0
            handle = struct.unpack("=II", body)[0]
            assert _call(s, Op.QUERY_PORT, struct.pack("=II", handle, 2))[0] == errno.EINVAL
            assert _call(s, Op.QUERY_GID, struct.pack("=III", handle, 1, 9))[0] == errno.ENODATA
            assert _call(s, Op.READ_SYSFS, b"/sys/class/infiniband/nsnic0/board_id")[0] \
                == errno.ENOENT
            assert _call(s, Op.READ_SYSFS, b"/sys/class/infiniband/nsnic0/node_guid") == (
                0, b"0000:00ff:fe00:000a\n")
        # a stream that is not the protocol is dropped; the server serves the next program
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(server.path)
            s.sendall(struct.pack("=II", 1 << 30, 1))
            assert s.recv(8) == b""
        r = _run_on(server, "ibv_devices")
        assert r.returncode == 0 and "nsnic1" in r.stdout


def test_the_protocol_tables_agree_with_the_c_header() -> None:
    text = NSRPC_H.read_text()

    def table(macro: str) -> list[str]:
        body = text.split(f"#define {macro}(X)", 1)[1].split("\n\n", 1)[0]
        return re.findall(r'X\(\w+,\s*[\w.]+,\s*"([\w.]+)"\)', body.replace("\\\n", " "))

    assert table("NSRPC_DEVICE_ATTRS") == list(DEVICE_ATTRS)
    assert table("NSRPC_PORT_ATTRS") == list(PORT_ATTRS)
    ops = dict(re.findall(r"NSRPC_(\w+) = (\d+),", text))
    assert {k: int(v) for k, v in ops.items()} == {op.name: int(op) for op in Op}


def test_the_library_exports_what_debian_libibverbs_exports() -> None:
    real = Path("/usr/lib/x86_64-linux-gnu/libibverbs.so.1")
    if shutil.which("objdump") is None or not real.exists():
        pytest.skip("objdump or Debian's libibverbs1 is not here to compare with")
    lib, why = native.library()
    assert lib is not None, why

    def exports(path: Path) -> set[tuple[str, str]]:
        out = subprocess.run(["objdump", "-T", str(path)], capture_output=True, text=True,
                             check=True).stdout
        return {(f[-2], f[-1]) for f in (line.split() for line in out.splitlines())
                if len(f) >= 6 and f[3] in (".text", ".data", ".bss")
                and not f[-2].startswith("(")}

    assert exports(lib) == exports(real)
    # programs that link rdma-core's providers (libmlx5, libefa: linked with BIND_NOW)
    # start, find every symbol, and report no device when there is no server
    for prog in ("ib_write_bw", "ib_send_lat"):
        if shutil.which(prog):
            r = subprocess.run([prog], env={"LD_LIBRARY_PATH": str(lib.parent),
                                            "PATH": "/usr/bin:/bin"},
                               capture_output=True, text=True, timeout=60, check=False)
            assert "Did not detect devices" in r.stdout + r.stderr, r.stderr
