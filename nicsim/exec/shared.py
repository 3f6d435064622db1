"""Named worlds that several `nicsim exec` commands share, as programs on several machines
share a network: `nicsim exec --world W --host a -- ib_write_bw ...` in one shell and
`nicsim exec --world W --host b -- ib_write_bw ... a` in another.

The first command to name W starts the world's server, a process of its own (`python -m
nicsim.exec.shared W`) that holds the world and serves C programs (nicsim.exec.cserver) on
one Unix socket per host, in W's directory (under $XDG_RUNTIME_DIR/nicsim/worlds, or the
temporary directory). A program on host a connects to a.sock and sees host a's devices
only. Every command holds a session on control.sock while its program runs; the server
closes the world (flushing its captures) and goes away once no command has held a session
for GRACE_S seconds. A lock file makes the start race-free: of two commands that start at
once, one starts the server and the other finds it.

The world's description (NICSIM_WORLD and the options) is the first command's; later
commands that name W join it as it is.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from nicsim.exec.spec import ENV, SpecError, from_env, save

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
GRACE_S = 2.0  # the server outlives its last session by this long (a command about to join)
START_S = 60.0  # a server nobody joins within this long goes away
READY_S = 60.0  # how long a command waits for the server it started


class SharedError(Exception):
    """A shared world cannot be used; one line saying why."""


def is_name(text: str) -> bool:
    """Whether `--world TEXT` names a shared world (a word) rather than describing one."""
    return NAME.fullmatch(text) is not None


def world_dir(name: str) -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / "nicsim" / "worlds" / name


def host_socket(where: Path, host: str) -> Path:
    return where / f"{host}.sock"


class Session:
    """A command's hold on a shared world: the server stays while one is open."""

    def __init__(self, where: Path, hosts: list[str], sock: socket.socket) -> None:
        self.where, self.hosts, self._sock = where, hosts, sock

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


def _connect(path: Path) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
    except OSError:
        s.close()
        return None
    return s


def _session(where: Path) -> Session | None:
    s = _connect(where / "control.sock")
    if s is None:
        return None
    f = s.makefile("rb")
    line = f.readline().decode().strip()  # the server's hosts, one line
    if not line:
        s.close()
        return None
    return Session(where, line.split(","), s)


def join(name: str, env: dict[str, str]) -> Session:
    """A session on world `name`, started from NICSIM_WORLD in `env` if it is not running."""
    where = world_dir(name)
    where.mkdir(parents=True, exist_ok=True)
    with open(where.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        s = _session(where)
        if s is not None:
            return s
        log = open(where.parent / f"{name}.log", "w")  # noqa: SIM115 (the server's stderr)
        subprocess.Popen([sys.executable, "-m", "nicsim.exec.shared", name], env=env,
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True)  # (Ctrl-C in this shell is not its end)
        log.close()
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            s = _session(where)
            if s is not None:
                return s
            time.sleep(0.05)
    raise SharedError(f"--world {name}: its server did not start (see "
                      f"{where.parent / (name + '.log')})")


def serve(name: str) -> int:
    """The server of world `name` (run as `python -m nicsim.exec.shared NAME`)."""
    from nicsim.exec.cserver import VerbsServer
    from nicsim.exec.world import build, netdevs

    where = world_dir(name)
    try:
        spec = from_env()
    except SpecError as e:
        print(f"error: {ENV}: {e}", file=sys.stderr)
        return 2
    try:
        world = build(spec)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for stale in where.glob("*.sock"):
        stale.unlink()
    save(netdevs(world), str(where))  # what the rdma, ip and cat shims answer
    server = VerbsServer(str(where / "all.sock"), lambda: world)
    server.start()
    for host in world.hosts:
        server.listen(str(host_socket(where, host)), host)
    hosts = ",".join(world.hosts).encode() + b"\n"
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    control.bind(str(where / "control.sock"))
    control.listen(16)
    sessions = [0]
    last = [time.monotonic() + START_S - GRACE_S]  # when the last session ended
    closing = [False]
    guard = threading.Lock()

    def hold(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.sendall(hosts)
            while conn.recv(64):  # a command sends nothing; EOF is its end
                pass
        with guard:
            sessions[0] -= 1
            last[0] = time.monotonic()

    def accept() -> None:
        while True:
            try:
                conn, _ = control.accept()
            except OSError:
                return
            with guard:
                if closing[0]:  # (it reached us as we went: it starts a new server)
                    conn.close()
                    continue
                sessions[0] += 1
            threading.Thread(target=hold, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    with open(where.parent / f"{name}.lock", "w") as lock:
        while not closing[0]:
            time.sleep(0.2)
            try:  # (a command joining holds the lock: not now)
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            with guard:
                if sessions[0] == 0 and server.clients == 0 and \
                        time.monotonic() - last[0] > GRACE_S:
                    closing[0] = True
                    with contextlib.suppress(OSError):
                        (where / "control.sock").unlink()
                    control.close()
            fcntl.flock(lock, fcntl.LOCK_UN)
    server.close()  # closes the world: its captures are complete
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
