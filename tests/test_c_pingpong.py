"""Debian's ibv_rc_pingpong under `nicsim exec` (issue 26, phase 2): two processes on one
simulated world exchange their messages and print their usual lines; the capture shows the
RoCEv2 SENDs with the bytes the program sent; a program killed mid-run leaves nothing in the
world and its peer gets the error the real stack gives; a verb misused answers the kernel's
errno. ibv_ud_pingpong and ib_write_bw (both roles) run too."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nicsim.exec import native
from nicsim.exec.cserver import SOCKET_ENV, VerbsServer
from nicsim.exec.spec import WorldSpec
from nicsim.exec.world import build
from nicsim.fabric.pcap import check_pcap

if shutil.which("ibv_rc_pingpong") is None:
    pytest.skip("ibverbs-utils is not installed (make tools installs it)",
                allow_module_level=True)

ROCE_PORT = 4791
SEND_FIRST, SEND_MIDDLE, SEND_LAST, RDMA_WRITE_ONLY = 0, 1, 2, 10  # RC opcodes (IBA 9.2)


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _exec(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nicsim.cli", "exec", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=90, check=False)


def _pair(prog: str, flags: str, port: str, gid: str = "-g 3") -> str:
    """Both sides of a program on one world: the server on nsnic1, the client on nsnic0
    (GID index 3: RoCE v2 over IPv4), each output in files of its own; the exit statuses
    on stdout. The client is started again while the server is not listening yet (its
    first verb builds the world, which a busy machine may take more than the usual
    `sleep 0.5` over): neither rc_pingpong's nor perftest's client retries its connect."""
    return (f"{prog} -d nsnic1 {gid} -p {port} {flags} >server.out 2>server.err & "
            "for i in $(seq 100); do sleep 0.2; "
            f"{prog} -d nsnic0 {gid} -p {port} {flags} 127.0.0.1 "
            ">client.out 2>client.err; c=$?; "
            "grep -q \"Couldn't connect\" client.out client.err || break; done; "
            "wait $!; s=$?; echo $c $s")


def _pingpong(flags: str, port: str) -> str:
    return _pair("ibv_rc_pingpong", flags, port)


def _run_pingpong(tmp_path: Path, flags: str, *options: str,
                  prog: str = "ibv_rc_pingpong", gid: str = "-g 3") -> subprocess.CompletedProcess:
    """`_pair` under nicsim exec; what the two sides said if it does not end."""
    try:
        return _exec([*options, "--", "sh", "-c", _pair(prog, flags, _free_port(), gid)],
                     tmp_path)
    except subprocess.TimeoutExpired:
        said = {f: (tmp_path / f).read_text() for f in ("server.out", "server.err",
                                                         "client.out", "client.err")
                if (tmp_path / f).exists()}
        raise AssertionError(f"ibv_rc_pingpong did not end: {said}") from None


def _messages(pcaps: list[Path]) -> list[bytes]:
    """The payloads of the RC SEND messages in the captures (FIRST, MIDDLE..., LAST)."""
    from scapy.all import UDP, rdpcap

    out, cur = [], b""
    for path in pcaps:
        for p in rdpcap(str(path)):
            if UDP not in p or p[UDP].dport != ROCE_PORT:
                continue
            roce = bytes(p[UDP].payload)
            op, payload = roce[0], roce[12:-4]  # after the BTH, before the ICRC
            if op == SEND_FIRST:
                cur = payload
            elif op == SEND_MIDDLE:
                cur += payload
            elif op == SEND_LAST:
                out.append(cur + payload)
    return out


def test_rc_pingpong_runs_between_two_processes_on_one_world(tmp_path: Path) -> None:
    # -c: the client writes 0 at the start of each page of its buffer (0x7b elsewhere) and
    # the server checks that it received that
    r = _run_pingpong(tmp_path, "-n 100 -c", "--pcap", "cap")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "0"]  # both sides' exit statuses
    for side in ("server", "client"):
        out = (tmp_path / f"{side}.out").read_text().splitlines()
        assert (tmp_path / f"{side}.err").read_text() == ""
        assert out[0].startswith("  local address:  LID 0x0000, QPN 0x")
        assert out[1].startswith("  remote address: LID 0x0000, QPN 0x")
        assert out[0].endswith(f"GID ::ffff:10.0.0.{1 if side == 'client' else 2}")
        assert len(out) == 4, out  # (no "invalid data in page" line)
        assert out[2].startswith("819200 bytes in ") and out[2].endswith(" Mbit/sec")
        assert out[3].startswith("100 iters in ") and out[3].endswith(" usec/iter")
    pcaps = sorted((tmp_path / "cap").glob("*.pcap"))
    assert len(pcaps) == 2
    for p in pcaps:
        rep = check_pcap(p)
        assert rep.ok and rep.roce_frames == rep.frames, rep.bad[:3]
    # 100 messages each way, 4096 bytes each in four 1024-byte packets (rc_pingpong's MTU),
    # all of them the client's bytes (the server sends back what it received)
    msgs = _messages(pcaps)
    assert len(msgs) == 200
    assert set(msgs) == {b"\0" + b"\x7b" * 4095}


def test_rc_pingpong_waits_on_its_completion_channel(tmp_path: Path) -> None:
    # -e: ibv_req_notify_cq and ibv_get_cq_event on a completion channel
    r = _run_pingpong(tmp_path, "-n 20 -e -s 64")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "0"], [
        (tmp_path / f).read_text() for f in ("server.err", "client.err")]
    for side in ("server", "client"):
        assert "2560 bytes in " in (tmp_path / f"{side}.out").read_text()


def test_ud_pingpong_sends_datagrams_through_an_address_handle(tmp_path: Path) -> None:
    r = _run_pingpong(tmp_path, "-n 50", prog="ibv_ud_pingpong")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "0"], [
        (tmp_path / f).read_text() for f in ("server.err", "client.err")]
    for side in ("server", "client"):
        out = (tmp_path / f"{side}.out").read_text().splitlines()
        assert out[2].startswith("102400 bytes in "), out  # 50 x 2048 bytes each way
        assert out[3].startswith("50 iters in ")


def test_ib_write_bw_runs_in_both_roles_on_one_world(tmp_path: Path) -> None:
    if shutil.which("ib_write_bw") is None:
        pytest.skip("perftest is not installed (make tools installs it)")
    r = _run_pingpong(tmp_path, "-s 4096 -n 200 --report_gbits", "--pcap", "cap",
                      prog="ib_write_bw", gid="-x 3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "0"], [
        (tmp_path / f).read_text() for f in ("server.err", "client.err")]
    for side in ("server", "client"):
        rows = [line.split() for line in (tmp_path / f"{side}.out").read_text().splitlines()]
        # (the figures are wall-clock ones in this phase: only that it completed)
        assert any(row[:2] == ["4096", "200"] and len(row) == 5 for row in rows), rows
    from scapy.all import UDP, rdpcap

    writes = [bytes(p[UDP].payload) for f in sorted((tmp_path / "cap").glob("*.pcap"))
              for p in rdpcap(str(f)) if UDP in p and p[UDP].dport == ROCE_PORT
              and bytes(p[UDP].payload)[0] == RDMA_WRITE_ONLY]
    # 200 WRITEs of 4096 bytes, each one packet (perftest's MTU is 4096): BTH, RETH (its
    # DMA length 4096), the data, ICRC
    assert len(writes) == 200
    assert {len(w) for w in writes} == {12 + 16 + 4096 + 4}
    assert {int.from_bytes(w[24:28], "big") for w in writes} == {4096}


MISUSE_C = r"""
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <infiniband/verbs.h>

#define SHOW(what, v) printf("%s %d\n", what, (int)(v))

int main(void)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
             .max_recv_sge = 1 } };
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS };
    char *buf = malloc(4096);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_sge sge = { (uintptr_t)buf, 64, mr->lkey };
    struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1,
        .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
    struct ibv_wc wc;

    SHOW("state", qp->state);
    SHOW("modify_reset_to_rts", ibv_modify_qp(qp, &a, IBV_QP_STATE));
    SHOW("post_send_in_reset", ibv_post_send(qp, &wr, &bad));
    SHOW("bad_wr_is_wr", bad == &wr);
    SHOW("poll_empty", ibv_poll_cq(cq, 1, &wc));
    SHOW("dealloc_pd_in_use", ibv_dealloc_pd(pd));
    SHOW("destroy_cq_in_use", ibv_destroy_cq(cq));
    errno = 0;
    SHOW("reg_mr_unmapped", ibv_reg_mr(pd, (void *)4096, 4096, IBV_ACCESS_LOCAL_WRITE)
                ? 0 : errno);
    SHOW("destroy_qp", ibv_destroy_qp(qp));
    SHOW("dereg_mr", ibv_dereg_mr(mr));
    SHOW("destroy_cq", ibv_destroy_cq(cq));
    SHOW("dealloc_pd", ibv_dealloc_pd(pd));
    SHOW("close_device", ibv_close_device(ctx));
    ibv_free_device_list(list);
    return 0;
}
"""


def test_a_misused_verb_answers_the_kernels_errno(tmp_path: Path) -> None:
    if shutil.which("gcc") is None or not native.HEADER.is_file():
        pytest.skip("gcc or libibverbs-dev is not installed (make tools installs them)")
    (tmp_path / "misuse.c").write_text(MISUSE_C)
    subprocess.run(["gcc", "-Wall", "-Wextra", "-Werror", "-o", "misuse", "misuse.c",
                    "-libverbs"], cwd=tmp_path, check=True, timeout=60)
    r = _exec(["--", "./misuse"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert dict(line.split() for line in r.stdout.splitlines()) == {
        "state": "0",  # IBV_QPS_RESET
        "modify_reset_to_rts": "22",  # EINVAL: not a transition of the QP state machine
        "post_send_in_reset": "22", "bad_wr_is_wr": "1",  # (and bad_wr is the WR)
        "poll_empty": "0",
        "dealloc_pd_in_use": "16", "destroy_cq_in_use": "16",  # EBUSY
        "reg_mr_unmapped": "14",  # EFAULT: memory the program does not have
        "destroy_qp": "0", "dereg_mr": "0", "destroy_cq": "0", "dealloc_pd": "0",
        "close_device": "0"}


def _until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_a_killed_program_leaves_nothing_and_its_peer_fails(tmp_path: Path) -> None:
    lib, why = native.library()
    assert lib is not None, why
    with VerbsServer(str(tmp_path / "verbs.sock"), lambda: build(WorldSpec())) as server:
        env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(lib.parent),
               SOCKET_ENV: server.path}
        port = _free_port()
        cmd = ["ibv_rc_pingpong", "-g", "3", "-n", "100000000", "-p", port]
        procs = []
        try:
            victim = subprocess.Popen([*cmd, "-d", "nsnic1"], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            procs.append(victim)
            time.sleep(0.5)
            peer = subprocess.Popen([*cmd, "-d", "nsnic0", "127.0.0.1"], env=env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            procs.append(peer)
            _until(lambda: server.requests > 2000, 20, "the ping-pong to run")
            assert server.world is not None
            nics = server.world.nics
            assert all(len(nic.qps) == 1 for nic in nics.values())
            # The peer stopped first, so the victim (which answers every message at once)
            # has nothing outstanding when it dies: the peer's next send is the one that
            # meets no QP, whatever the moment.
            peer.send_signal(signal.SIGSTOP)
            time.sleep(0.3)
            victim.kill()
            victim.wait(10)
            _until(lambda: server.clients == 1, 10, "the server to clean up after the kill")
            assert nics["b"].qps == {}  # its QP is gone from the NIC's table
            peer.send_signal(signal.SIGCONT)
            out, err = peer.communicate(timeout=30)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(10)
        # the peer's send found no QP: retried until its retry count ran out, then the
        # completion error, which ibv_rc_pingpong reports, and exits 1
        assert peer.returncode == 1
        assert "remote address: LID 0x0000" in out
        assert err.startswith("Failed status transport retry counter exceeded (12) for "
                              "wr_id 2\n"), err
        _until(lambda: server.clients == 0, 10, "the peer's exit to be cleaned up")
        assert all(nic.qps == {} for nic in nics.values())
        for host in server.world.hosts.values():
            assert host.mem.pins == {}  # no MR, ring or page left pinned for a device
        for t in server.trackers:
            assert t.owner == {} and t.dirty == []  # no mirrored page left
