"""nicsim's libibverbs.so.1 for C programs under `nicsim exec`: where it is, and building it.

The library's sources are native/libibverbs/ at the top of the repository; it is built by
`make native` (which `make test` and `make run` run) into build/native/, from Debian's gcc,
make and libibverbs-dev. `nicsim exec` calls `library()` before it starts a command: a
library that is missing or older than its sources is built then (under a lock, so
concurrent `nicsim exec` commands build it once), so an edited source or a fresh clone
needs no step of its own.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

LIB_NAME = "libibverbs.so.1"
HOSTS_LIB = "libnicsim_hosts.so"  # LD_PRELOAD: the world's host names (hostnames.c)
HEADER = Path("/usr/include/infiniband/verbs.h")  # libibverbs-dev


# The repository's root (this file is nicsim/exec/native.py): from this module's own path, so
# a directory named nicsim in the working directory cannot stand in for the package.
_ROOT = Path(__file__).resolve().parents[2]


def source_dir() -> Path:
    return _ROOT / "native" / "libibverbs"


def build_dir() -> Path:
    return _ROOT / "build" / "native"


def _stale(lib: Path, src: Path) -> bool:
    if not lib.exists():
        return True
    built = lib.stat().st_mtime
    return any(f.stat().st_mtime > built for f in src.iterdir() if f.is_file())


def library() -> tuple[Path | None, str]:
    """The built library (made or remade if its sources changed), or None and why not."""
    src, out = source_dir(), build_dir()
    lib = out / LIB_NAME
    if not (src / "Makefile").is_file():
        return (lib if lib.exists() else None), "its sources (native/libibverbs) are not here"
    if not _stale(lib, src) and (out / HOSTS_LIB).exists():
        return lib, ""
    missing = [what for what, ok in (("make", shutil.which("make")), ("gcc", shutil.which("gcc")),
                                     ("libibverbs-dev", HEADER.is_file())) if not ok]
    if missing:
        return (lib if lib.exists() else None), \
            f"{', '.join(missing)} not installed (make tools installs them)"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (another nicsim exec may be building it)
        if _stale(lib, src) or not (out / HOSTS_LIB).exists():
            r = subprocess.run(["make", "-s", "-C", str(src), f"OUT={out}"],
                               capture_output=True, text=True, check=False)
            if r.returncode:
                err = (r.stderr.strip().splitlines() or ["make failed"])[-1]
                return (lib if lib.exists() else None), f"building it failed: {err}"
    return lib, ""
