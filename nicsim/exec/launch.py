"""`nicsim exec [options] -- COMMAND [ARGS...]`: run COMMAND with nicsim's pyverbs importable,
the simulated world's `rdma` and `ip` first on PATH, and nicsim's libibverbs.so.1 first on
LD_LIBRARY_PATH with a verbs server behind it for a C program (nicsim.exec.cserver); exit
with COMMAND's status."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import nicsim.driver
from nicsim.exec import native, shared
from nicsim.exec.cserver import CLOCK_ENV, CLOCK_FILE, SOCKET_ENV, VerbsServer
from nicsim.exec.spec import (
    ENV,
    HOSTS_ENV,
    SHIM_DIR_ENV,
    WORLD_FILE,
    SpecError,
    WorldSpec,
    from_env,
    save,
)
from nicsim.exec.world import build, netdevs
from nicsim.usage import OneLineParser, UsageError


def facade_dir() -> Path:
    """The directory that holds nicsim's `pyverbs` package (driver/facade)."""
    return Path(nicsim.driver.__path__[0]) / "facade"


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="nicsim exec",
        description="Run COMMAND with nicsim's pyverbs package importable, nicsim's "
        "libibverbs.so.1 first on LD_LIBRARY_PATH (for C verbs programs such as ibv_devinfo) "
        "and the simulated world's devices visible to it (and to `rdma link show`, "
        "`ip addr show`). Options "
        f"override the world in ${ENV} (key=value,...; default: 2 hosts, one device each, "
        "on one 100 Gb/s cable).")
    p.add_argument("--hosts", type=int, help="hosts, one nsnic device each (1: an "
                   "unconnected port; 3 or more: a star around one switch)")
    p.add_argument("--mem-mib", type=int, help="physical memory of each host")
    p.add_argument("--seed", type=int, help="seed of the world")
    p.add_argument("--rate-gbps", type=float, help="link rate (default: the profile's)")
    p.add_argument("--profile", metavar="NAME|FILE", help="the hardware: a NIC profile "
                   "(nicsim profiles lists them), as nicsim run --profile")
    p.add_argument("--host-profile", metavar="NAME|FILE", help="the host around the NIC "
                   "(nicsim profiles --hosts lists them), as nicsim run --host-profile")
    p.add_argument("--loss", type=float, metavar="P", help="probability that a cable drops "
                   "each frame, as nicsim run --loss")
    p.add_argument("--pcap", metavar="DIR", help="write every host port's frames (and what "
                   "its NIC loops back) to DIR/nicsim-PID-HOST.pcap")
    p.add_argument("--world", metavar="NAME|KEY=VALUE,...",
                   help="KEY=VALUE,...: the world as NICSIM_WORLD says it; NAME: a world that "
                   "several nicsim exec commands share (the first starts it, with the world "
                   "its options and NICSIM_WORLD describe; C programs)")
    p.add_argument("--host", metavar="HOST", help="run as a program on HOST (a, b, ... or "
                   "h0, h1, ...): a C program sees that host's devices only, and the world's "
                   "host names reach this machine for out-of-band TCP (perftest's server name)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command (after --)")
    return p


def _shims(where: Path) -> None:
    """`rdma`, `ip` and `cat` scripts that run nicsim.exec.answers with this interpreter
    (`cat` only for the simulated devices' sysfs files: anything else goes to the system's
    cat), and `python`/`python3` that are this interpreter."""
    py = shlex.quote(sys.executable)
    for tool in ("rdma", "ip", "cat"):
        f = where / tool
        # -c, not -m: the program's sitecustomize has imported nicsim.exec.answers already,
        # and runpy warns when it runs a module that is in sys.modules as __main__
        run = (f"exec {py} -c 'import sys; from nicsim.exec.answers import main; "
               f"sys.exit(main())' {tool} \"$@\"\n")
        if tool == "cat":
            run = ('case "$*" in */sys/class/infiniband/*) ' + run.strip() + ";; esac\n"
                   f'PATH=$(printf %s "$PATH" | sed "s#^{where}:##") exec cat "$@"\n')
        f.write_text("#!/bin/sh\n" + run)
        f.chmod(0o755)
    # `python` and `python3` are nicsim's own interpreter, whatever is active: a user types
    # `nicsim exec -- python app.py`, and another Python has no nicsim for its pyverbs.
    for name in ("python", "python3"):
        f = where / name
        f.write_text(f"#!/bin/sh\nexec {py} \"$@\"\n")
        f.chmod(0o755)


def _library(shim: Path, env: dict[str, str], command: str, hosts: list[str]) -> bool:
    """nicsim's libibverbs.so.1 in the shim directory, first on LD_LIBRARY_PATH, and the
    world's host names resolving to this machine (nicsim.exec.shared); False if there is
    no library."""
    lib, why = native.library()
    if why and not Path(command).name.startswith("python"):
        print(f"warning: nicsim exec: nicsim's libibverbs: {why}"
              + ("" if lib else "; C programs see this machine's RDMA devices, not the "
                 "simulated ones"), file=sys.stderr)
    if lib is None:
        return False
    (shim / native.LIB_NAME).symlink_to(lib)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [str(shim)] + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
    names = lib.with_name(native.HOSTS_LIB)
    if names.exists():
        env["LD_PRELOAD"] = " ".join([str(names), *env.get("LD_PRELOAD", "").split()])
        env[HOSTS_ENV] = ",".join(hosts)
    return True


def _c_programs(spec: WorldSpec, shim: Path, env: dict[str, str], command: str,
                host: str | None, hosts: list[str]) -> VerbsServer | None:
    """What a C program needs (_library) and a verbs server on a socket in the shim
    directory (it builds the world at the first connection, so a command that opens no
    device costs nothing)."""
    if not _library(shim, env, command, hosts):
        return None
    sock = shim / "verbs.sock"
    server = VerbsServer(str(sock), lambda: build(spec))
    try:
        server.start(host)
    except OSError as e:  # (e.g. a $TMPDIR too long for a Unix socket's path)
        print(f"warning: nicsim exec: no verbs server for C programs: {sock}: {e.strerror}",
              file=sys.stderr)
        return None
    env[SOCKET_ENV] = str(sock)
    env[CLOCK_ENV] = server.clock_path
    return server


def _check_host(host: str | None, hosts: list[str]) -> None:
    if host is not None and host not in hosts:
        raise UsageError(f"--host {host}: no such host (the world's hosts: "
                         f"{', '.join(hosts)})")


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        print("error: nicsim exec: no command given (nicsim exec [options] -- COMMAND ...)",
              file=sys.stderr)
        return 2
    env = dict(os.environ)
    text = ",".join(f"{k}={v}" for k, v in (("hosts", args.hosts), ("mem_mib", args.mem_mib),
                                               ("seed", args.seed),
                                               ("rate_gbps", args.rate_gbps),
                                               ("pcap", args.pcap), ("profile", args.profile),
                                               ("host_profile", args.host_profile),
                                               ("loss", args.loss)) if v is not None)
    name = args.world if args.world and shared.is_name(args.world) else None
    try:
        spec = from_env(env).with_text("" if name else args.world or "").with_text(text)
    except SpecError as e:
        print(f"error: nicsim exec: {e}", file=sys.stderr)
        return 2
    if spec.pcap:
        d = Path(spec.pcap)
        # DIR is made, not its parents (as run --out: a missing parent is more likely a typo)
        if not d.is_dir() and not d.parent.is_dir():
            print(f"error: nicsim exec: --pcap {d}: directory {d.parent} does not exist",
                  file=sys.stderr)
            return 2
        d.mkdir(exist_ok=True)
        spec = spec.with_text(f"pcap={d.resolve()}")
    env[ENV] = spec.to_env()
    env["PYTHONPATH"] = os.pathsep.join(
        [str(facade_dir())] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    with tempfile.TemporaryDirectory(prefix="nicsim-exec-") as tmp:
        shim = Path(tmp)
        _shims(shim)
        env[SHIM_DIR_ENV] = str(shim)
        env["PATH"] = os.pathsep.join([str(shim), env.get("PATH", "")])
        server: VerbsServer | None = None
        session: shared.Session | None = None
        try:
            if name is not None:
                session = shared.join(name, env)
                _check_host(args.host, session.hosts)
                # what the shims answer: the shared world's devices
                shutil.copy(session.where / WORLD_FILE, shim / WORLD_FILE)
                if _library(shim, env, cmd[0], session.hosts):
                    env[SOCKET_ENV] = str(session.where / (
                        f"{args.host}.sock" if args.host else "all.sock"))
                    env[CLOCK_ENV] = str(session.where / CLOCK_FILE)
                if Path(cmd[0]).name.startswith("python"):
                    print(f"note: nicsim exec: --world {name} is shared by C programs; a "
                          "pyverbs program runs in a world of its own", file=sys.stderr)
            else:
                w = build(spec, pcap=False)
                hosts = list(w.hosts)
                _check_host(args.host, hosts)
                save(netdevs(w), tmp)  # what the shims answer, once
                server = _c_programs(spec, shim, env, cmd[0], args.host, hosts)
        except (UsageError, SpecError, shared.SharedError) as e:
            if session is not None:
                session.close()
            print(f"error: nicsim exec: {e}", file=sys.stderr)
            return 2
        try:
            try:
                proc = subprocess.Popen(cmd, env=env)
            except OSError as e:
                print(f"error: nicsim exec: {cmd[0]}: {e.strerror}", file=sys.stderr)
                return 127
            while True:
                try:
                    rc = proc.wait()
                    break
                except KeyboardInterrupt:  # the child got the SIGINT too; wait for it to end
                    continue
        finally:
            if server is not None:
                server.close()
            if session is not None:
                session.close()
    if rc < 0:  # killed by a signal: exit as a shell reports it
        return 128 - rc if -rc != signal.SIGPIPE else 141
    return rc
