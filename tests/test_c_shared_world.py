"""Two `nicsim exec` commands on one named world, as a user runs perftest on two machines:
`nicsim exec --world W --host a -- ib_write_bw ...` and, at the same time, `nicsim exec --world
W --host b -- ib_write_bw ... a`. The first command starts the world's server, each program
sees its own host's device, the server name `a` reaches host a, the frames are on the world's
wire, and the server goes away when both are done."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nicsim.fabric.pcap import check_pcap
from nicsim.wire import Opcode, parse

pytestmark = pytest.mark.skipif(shutil.which("ib_write_bw") is None
                                or shutil.which("ibv_devices") is None,
                                reason="perftest / ibverbs-utils are not installed "
                                       "(make test installs them)")


def _exec(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen:
    # (not in XDG_RUNTIME_DIR itself: `python -m` would import its nicsim/ folder, where the
    # worlds live, as the package)
    work = cwd / "work"
    work.mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "nicsim.cli", "exec", *args], env=env,
                            cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "XDG_RUNTIME_DIR": str(tmp)}


def _pair(tmp: Path, world: list[str], argv: list[str]) -> tuple[str, str]:
    """A perftest server on host a (the first command: it starts the world) and its client
    on host b, naming its server `a`; both outputs (client's first)."""
    env = _env(tmp)
    server = _exec([*world, "--host", "a", "--", *argv], env, tmp)
    client = None
    try:
        for _attempt in range(40):  # until the server listens on its TCP port
            time.sleep(0.5)
            client = _exec(["--world", world[1], "--host", "b", "--", *argv, "a"], env, tmp)
            out, err = client.communicate(timeout=120)
            if "Couldn't connect" not in out + err:
                break
        assert client is not None and client.returncode == 0, err
        sout, serr = server.communicate(timeout=120)
    finally:
        for p in (server, client):
            if p is not None and p.poll() is None:
                p.kill()
    assert server.returncode == 0, serr
    # The world's server closes the world when both are done: the captures are whole.
    sock = tmp / "nicsim" / "worlds" / world[1] / "control.sock"
    for _ in range(100):
        if not sock.exists():
            break
        time.sleep(0.1)
    assert not sock.exists()
    time.sleep(0.5)
    return out, sout


def _write_bw(tmp: Path, world: list[str], n: int) -> tuple[str, str]:
    return _pair(tmp, world, ["ib_write_bw", "-s", "4096", "-n", str(n), "--report_gbits"])


def _sent(cap: Path, host: str) -> list:
    from scapy.utils import RawPcapReader

    (path,) = sorted(cap.glob(f"*-{host}.pcap"))  # (the frames host's port sent)
    assert not check_pcap(path).bad
    return [parse(bytes(f)) for f, _ in RawPcapReader(str(path))]


def test_perftest_on_two_hosts_of_one_named_world(tmp_path: Path) -> None:
    cap = tmp_path / "cap"
    out, sout = _write_bw(tmp_path, ["--world", "W", "--pcap", str(cap)], 200)
    for text in (out, sout):
        row = [ln.split() for ln in text.splitlines() if ln.split()[:2] == ["4096", "200"]]
        assert len(row) == 1, text  # the result line: size, iterations, peak, average, rate
    # Each saw its own host's device and GID: the client is host b (10.0.0.2).
    assert "GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:00:02" in out.split("remote")[0]
    # perftest's 200 WRITEs of 4096 bytes went from host b, and host a acknowledged them
    writes = [p for p in _sent(cap, "b") if p.opcode == Opcode.RC_RDMA_WRITE_ONLY]
    assert len(writes) == 200 and all(len(p.payload) == 4096 for p in writes)
    assert {p.opcode for p in _sent(cap, "a")} == {Opcode.RC_ACKNOWLEDGE}


def test_perftest_completes_under_loss_with_retransmissions_on_the_wire(tmp_path: Path) -> None:
    cap = tmp_path / "cap"
    out, _ = _write_bw(tmp_path, ["--world", "L", "--loss", "0.02", "--seed", "3",
                                  "--pcap", str(cap)], 300)
    assert any(ln.split()[:2] == ["4096", "300"] for ln in out.splitlines()), out
    writes = [p for p in _sent(cap, "b") if p.opcode == Opcode.RC_RDMA_WRITE_ONLY]
    psns = [p.psn for p in writes]
    # every WRITE went out, some of them again: the go-back-N resends after the drops
    assert len(set(psns)) == 300 and len(psns) > 300
    assert any(p.opcode == Opcode.RC_ACKNOWLEDGE and p.aeth_syndrome >> 5 == 3
               for p in _sent(cap, "a"))  # a NAK (PSN sequence error)


def test_a_program_on_one_host_sees_its_device_only(tmp_path: Path) -> None:
    env = _env(tmp_path)
    p = _exec(["--world", "V", "--host", "b", "--", "ibv_devices"], env, tmp_path)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "nsnic1" in out and "nsnic0" not in out
    p = _exec(["--world", "V", "--host", "zz", "--", "true"], env, tmp_path)
    _out, err = p.communicate(timeout=120)
    assert p.returncode == 2
    assert err.strip().splitlines()[-1] == \
        "error: nicsim exec: --host zz: no such host (the world's hosts: a, b)"


def test_host_in_a_private_world(tmp_path: Path) -> None:
    p = _exec(["--host", "a", "--", "ibv_devices"], _env(tmp_path), tmp_path)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "nsnic0" in out and "nsnic1" not in out


def _row(text: str, size: str, n: str) -> list[float]:
    (row,) = [ln.split() for ln in text.splitlines() if ln.split()[:2] == [size, n]]
    return [float(x) for x in row[2:]]  # what follows the size and the iterations


def test_real_ib_write_bw_measures_simulated_time_as_nicsim_perftest_does(tmp_path: Path) -> None:
    """The program's clocks are the world's (rdtsc and gettimeofday, native/libibverbs/
    clocks.c): Debian's ib_write_bw reports the bandwidth and message rate that nicsim's own
    perftest model gives for the same flags on the same world, within 5% (they agree to the
    last digit today: the same driver and NIC, the same CPU costs)."""
    out, _ = _write_bw(tmp_path, ["--world", "T"], 2000)
    real = _row(out, "4096", "2000")
    p = subprocess.run([sys.executable, "-m", "nicsim.cli", "perftest", "ib_write_bw", "-s",
                        "4096", "-n", "2000", "--report_gbits"], capture_output=True, text=True,
                       timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    model = _row(p.stdout, "4096", "2000")
    for name, r, m in zip(("BW average", "MsgRate"), real[1:], model[1:], strict=True):
        assert abs(r / m - 1) <= 0.05, (name, r, m)


def _model(argv: list[str]) -> str:
    p = subprocess.run([sys.executable, "-m", "nicsim.cli", "perftest", *argv],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("test", ["ib_send_lat", "ib_write_lat", "ib_read_lat"])
def test_real_latency_tests_measure_what_nicsim_perftest_does(tmp_path: Path,
                                                              test: str) -> None:
    """Both programs are busy (each polls while the other is between calls, or spins on
    its buffer): time passes only while neither is running (nicsim.exec.turns), so the
    round trips that Debian's ib_send_lat and ib_write_lat time are the world's, and their
    typical latency is what nicsim's perftest model gives for the same flags, within 5%."""
    argv = [test, "-s", "8", "-n", "200"]
    cap = tmp_path / "cap"
    out, sout = _pair(tmp_path, ["--world", "T", "--pcap", str(cap)], argv)
    model = _row(_model(argv), "8", "200")
    if test == "ib_send_lat":  # the ping-pong on the wire: 200 SENDs of 8 bytes each way
        for host in ("a", "b"):
            sends = [p for p in _sent(cap, host) if p.opcode == Opcode.RC_SEND_ONLY]
            assert len(sends) == 200 and all(len(p.payload) == 8 for p in sends), host
    # (both sides of a SEND or WRITE ping-pong report; a READ's server only answers)
    for text in (out, sout) if test != "ib_read_lat" else (out,):
        real = _row(text, "8", "200")  # t_min, t_max, t_typical, t_avg, ...
        assert abs(real[2] / model[2] - 1) <= 0.05, (test, real, model)
