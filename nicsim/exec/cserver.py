"""The verbs server of `nicsim exec`: unmodified C programs' verbs, run by the Python driver.

A C program (ibv_devinfo, ibv_rc_pingpong, perftest, ...) under `nicsim exec` loads nicsim's
libibverbs.so.1 (native/libibverbs/, first on LD_LIBRARY_PATH) instead of rdma-core's. That
library is a thin transport: it keeps libibverbs' ABI (symbols, versions, struct layouts)
and sends each verb over a Unix socket ($NICSIM_VERBS_SOCKET) to this server, which runs it
with nicsim's pyverbs (nicsim.driver) on the simulated world, exactly as a Python program's
call would run, and sends back the values or the errno. The Python driver stays the one
implementation of verbs semantics; the protocol is in native/libibverbs/nsrpc.h and below.

The server holds one world (built from the WorldSpec at the first connection) and, for each
connected program, a pyverbs process (nicsim.driver.user.process.Process: its devices and
address spaces) and the contexts it opened. The driver models "the current process" the way
a kernel does; the server makes the client's process current for each of its requests, as a
kernel switches `current` when a process makes a system call. A program's connection is its
life: when it closes (the program exited or was killed), its contexts are closed, as the
kernel cleans up after a process.

Phase 2 carries the objects and the data path (PD, MR, CQ and completion channel, QP, AH,
post, poll, events), so `ibv_rc_pingpong` runs. Registered memory stays in the program:
nicsim.exec.cmem mirrors it in the simulated host's memory and copies what the NIC reads and
writes. Several programs (connections) share the one world: a thread per connection, their
requests served one at a time in arrival order (a fair lock); a request that waits on the
world (an empty poll, a completion event) lets it run a bounded window of simulated time and
answers, so it never holds the world from the others. What is next
(docs/explanation/c-programs.md): simulated time for the programs' clocks, their TCP through
the world, and several `nicsim exec --world NAME` commands on one server.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import select
import socket
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from itertools import pairwise
from operator import attrgetter
from typing import Any

from nicsim.driver.enums import ibv_qp_type, ibv_wr_opcode
from nicsim.driver.kernel.events import CompChannel as KernelChannel
from nicsim.driver.kernel.events import EventError
from nicsim.driver.user import process as pyverbs_process
from nicsim.driver.user.device import get_device_list
from nicsim.driver.user.errors import PyverbsError
from nicsim.driver.user.verbs import (
    AH,
    CQ,
    GID,
    MR,
    PD,
    QP,
    SGE,
    AHAttr,
    CompChannel,
    Context,
    GlobalRoute,
    QPAttr,
    QPCap,
    QPInitAttr,
    RecvWR,
    SendWR,
)
from nicsim.exec.answers import sysfs
from nicsim.exec.cmem import SIM_BASE, Mirror, Tracker
from nicsim.exec.turns import (
    QUIET_SLICE_S,
    SPIN_CPU_NS,
    Phase,
    Turn,
    Turns,
    program_asleep,
    program_cpu_ns,
)
from nicsim.exec.world import devices, netdevs
from nicsim.host.host import Host
from nicsim.host.memory import AddressSpace, MemoryError_
from nicsim.world import World

VERSION = 2  # NSRPC_VERSION
SOCKET_ENV = "NICSIM_VERBS_SOCKET"  # NSRPC_SOCKET_ENV: where the C library connects
CLOCK_ENV = "NICSIM_CLOCK"  # the world's time for the programs' clocks (clocks.c)
CLOCK_FILE = "clock"
_I64 = struct.Struct("<q")
NAME_MAX = 64
MAX_BODY = 1 << 20  # a longer request is not one of ours: the connection is closed


class Op(IntEnum):
    """enum nsrpc_op."""

    HELLO = 1
    DEVICES = 2
    OPEN = 3
    CLOSE = 4
    QUERY_DEVICE = 5
    QUERY_PORT = 6
    QUERY_GID = 7
    QUERY_PKEY = 8
    READ_SYSFS = 9
    ALLOC_PD = 10
    DEALLOC_PD = 11
    REG_MR = 12
    DEREG_MR = 13
    CREATE_COMP_CHANNEL = 14
    DESTROY_COMP_CHANNEL = 15
    CREATE_CQ = 16
    DESTROY_CQ = 17
    REQ_NOTIFY_CQ = 18
    POLL_CQ = 19
    GET_CQ_EVENT = 20
    CREATE_QP = 21
    MODIFY_QP = 22
    QUERY_QP = 23
    DESTROY_QP = 24
    CREATE_AH = 25
    DESTROY_AH = 26
    POST_SEND = 27
    POST_RECV = 28


# The values QUERY_DEVICE and QUERY_PORT carry, in nsrpc.h's order (NSRPC_DEVICE_ATTRS,
# NSRPC_PORT_ATTRS): attributes of pyverbs' DeviceAttrEx and PortAttr.
DEVICE_ATTRS: tuple[str, ...] = tuple(f"orig_attr.{n}" for n in (
    "node_guid", "sys_image_guid", "max_mr_size", "page_size_cap", "vendor_id",
    "vendor_part_id", "hw_ver", "max_qp", "max_qp_wr", "device_cap_flags", "max_sge",
    "max_sge_rd", "max_cq", "max_cqe", "max_mr", "max_pd", "max_qp_rd_atom", "max_ee_rd_atom",
    "max_res_rd_atom", "max_qp_init_rd_atom", "max_ee_init_rd_atom", "atomic_caps", "max_ee",
    "max_rdd", "max_mw", "max_raw_ipv6_qp", "max_raw_ethy_qp", "max_mcast_grp",
    "max_mcast_qp_attach", "max_total_mcast_qp_attach", "max_ah", "max_fmr",
    "max_map_per_fmr", "max_srq", "max_srq_wr", "max_srq_sge", "max_pkeys",
    "local_ca_ack_delay", "phys_port_cnt")) + (
    "odp_caps.general_caps", "odp_caps.rc_odp_caps", "odp_caps.uc_odp_caps",
    "odp_caps.ud_odp_caps", "completion_timestamp_mask", "hca_core_clock",
    "device_cap_flags_ex", "tso_caps.max_tso", "tso_caps.supported_qpts",
    "rss_caps.supported_qpts", "rss_caps.max_rwq_indirection_tables",
    "rss_caps.max_rwq_indirection_table_size", "rss_caps.rx_hash_fields_mask",
    "rss_caps.rx_hash_function", "max_wq_type_rq", "packet_pacing_caps.qp_rate_limit_min",
    "packet_pacing_caps.qp_rate_limit_max", "packet_pacing_caps.supported_qpts",
    "raw_packet_caps", "tm_caps.max_rndv_hdr_size", "tm_caps.max_num_tags", "tm_caps.flags",
    "tm_caps.max_ops", "tm_caps.max_sge", "cq_mod_caps.max_cq_count",
    "cq_mod_caps.max_cq_period", "max_dm_size", "pci_atomic_caps.fetch_add",
    "pci_atomic_caps.swap", "pci_atomic_caps.compare_swap", "odp_caps.xrc_odp_caps",
    "phys_port_cnt_ex")
PORT_ATTRS: tuple[str, ...] = (
    "state", "max_mtu", "active_mtu", "gid_tbl_len", "port_cap_flags", "max_msg_sz",
    "bad_pkey_cntr", "qkey_viol_cntr", "pkey_tbl_len", "lid", "sm_lid", "lmc", "max_vl_num",
    "sm_sl", "subnet_timeout", "init_type_reply", "active_width", "active_speed",
    "phys_state", "link_layer", "flags", "port_cap_flags2")

_HDR = struct.Struct("=II")  # len, op (a reply: len, status)
_DEVICE = struct.Struct(f"={NAME_MAX}sQIII")  # struct nsrpc_device
_U32 = struct.Struct("=I")
_U32x2 = struct.Struct("=II")
_U32x3 = struct.Struct("=III")
_GID = struct.Struct("=16sII")
_DEV_VALUES = struct.Struct(f"={NAME_MAX}s{len(DEVICE_ATTRS)}Q")
_PORT_VALUES = struct.Struct(f"={len(PORT_ATTRS)}Q")
_get_device = attrgetter(*DEVICE_ATTRS)
_get_port = attrgetter(*PORT_ATTRS)
# The object requests' structs (nsrpc.h), field for field.
_REG_MR = struct.Struct("=IIQQQ")  # struct nsrpc_reg_mr
_CREATE_CQ = struct.Struct("=IiIiQ")  # struct nsrpc_create_cq
_CQ_REP = struct.Struct("=Ii")
_CAP = "5I"  # struct nsrpc_cap
_CREATE_QP = struct.Struct("=6I" + _CAP)  # struct nsrpc_create_qp
_QP_REP = struct.Struct("=II" + _CAP)
_AH = "16sIBBBBHBBBB"  # struct nsrpc_ah_attr
_QP_ATTR = "9I" + _CAP + _AH + _AH + "2H12BI"  # struct nsrpc_qp_attr
_MODIFY_QP = struct.Struct("=II" + _QP_ATTR)
_QUERY_QP_REP = struct.Struct("=" + _QP_ATTR + "II")
_CREATE_AH = struct.Struct("=I" + _AH)
_SEND_WR = struct.Struct("=QIIIIQIIIIQQII")  # struct nsrpc_send_wr
_RECV_WR = struct.Struct("=QII")  # struct nsrpc_recv_wr
_SGE = struct.Struct("=QII")  # struct nsrpc_sge
_WC = struct.Struct("=QIIIIIIIIHHBB2x")  # struct nsrpc_wc
_POSTED = struct.Struct("=iI")
_U64 = struct.Struct("=Q")
POLL_MAX = 256  # NSRPC_POLL_MAX
# How long a GET_CQ_EVENT lets the world run, at most, before it answers EAGAIN (the
# library asks again): as long as an empty poll's window (verbs.CQ.poll), so a program
# waiting on an event never holds the world from the others for long.
EVENT_WINDOW_NS = 100_000.0
_ACCESS_ON_DEMAND = 1 << 6  # IBV_ACCESS_ON_DEMAND
_ACCESS_REMOTE_READS = (1 << 2) | (1 << 3)  # IBV_ACCESS_REMOTE_READ | REMOTE_ATOMIC
_INVALIDATES = (ibv_wr_opcode.IBV_WR_SEND_WITH_INV, ibv_wr_opcode.IBV_WR_LOCAL_INV)


class Failed(Exception):
    """A request's errno (the reply's status)."""

    def __init__(self, err: int) -> None:
        super().__init__(os.strerror(err))
        self.errno = err


@dataclass
class Channel:
    """A completion channel and the program's eventfd for it (its channel->fd)."""

    channel: CompChannel
    fd: int
    signalled: bool = False  # the eventfd says "readable" and the program has not asked yet


@dataclass
class Registered:
    """An MR's range in the program and where it is mirrored."""

    mirror: Mirror
    va: int
    length: int
    remote_reads: bool  # a peer may read it (REMOTE_READ, REMOTE_ATOMIC)


@dataclass
class Client:
    """One connected program."""

    conn: socket.socket
    pid: int
    turn: Turn  # its phase (nicsim.exec.turns)
    name: str = "?"
    host: str | None = None  # the one host whose devices it sees (nicsim exec --host), or all
    process: pyverbs_process.Process | None = None
    contexts: dict[int, Context] = field(default_factory=dict)
    next_handle: int = 1
    # Its objects by handle (one counter with the contexts'), and what the server keeps
    # beside some of them.
    objects: dict[int, object] = field(default_factory=dict)
    cookies: dict[int, int] = field(default_factory=dict)  # CQ handle -> its ibv_cq *
    channels: dict[int, Channel] = field(default_factory=dict)
    mrs: dict[int, Registered] = field(default_factory=dict)
    mirrors: dict[int, Mirror] = field(default_factory=dict)  # id(aspace) -> its mirror
    scratch: dict[int, tuple[int, int]] = field(default_factory=dict)  # id(ctx) -> va, size
    fds: list[int] = field(default_factory=list)  # descriptors that came with the request
    clock: mmap.mmap | None = None  # its own clock's page (clocks.c), once it has one

    def handle(self, obj: object) -> int:
        h = self.next_handle
        self.next_handle += 1
        self.objects[h] = obj
        return h


class CProcess(pyverbs_process.Process):
    """A C program's pyverbs process: its simulated address spaces keep the server's own
    mappings above SIM_BASE, so the program's buffers can be mirrored at their own
    addresses (nicsim.exec.cmem)."""

    def aspace(self, host: Host) -> AddressSpace:
        a = self._aspaces.get(id(host))
        if a is None:
            a = self._aspaces[id(host)] = AddressSpace(host.mem, base=SIM_BASE)
        return a


def _program_clock(world_clock: str, pid: int) -> mmap.mmap | None:
    """The page of program `pid`'s clock (native/libibverbs/clocks.c: `$NICSIM_CLOCK.<pid>`,
    its own time, then the world's as told to it), or None if it has none."""
    try:
        with open(f"{world_clock}.{pid}", "r+b") as f:
            return mmap.mmap(f.fileno(), 16)
    except (OSError, ValueError):
        return None


def _u64(v: object) -> int:
    return int(v) & (1 << 64) - 1  # type: ignore[call-overload]


def _errno(e: BaseException, default: int = errno.EINVAL) -> int:
    """The errno a pyverbs exception carries (PyverbsRDMAError.error_code, when known)."""
    code = getattr(e, "error_code", -1)
    return code if isinstance(code, int) and code > 0 else default


class VerbsServer:
    """Serves the C programs of one world on the Unix socket `path`.

    `world` builds the world at the first connection (nicsim exec: the WorldSpec's). `start`
    listens in a thread; `close` ends every connection and closes the world (flushing its
    captures)."""

    def __init__(self, path: str, world: Callable[[], World]) -> None:
        self.path = path
        self._make_world = world
        self.world: World | None = None
        # The programs' phases and the lock on the world: one request at a time touches it,
        # in order, and time passes only while no program runs (nicsim.exec.turns).
        self.turns = Turns(self._copy_remote_readable, self._after_step, self._resume)
        self.trackers: list[Tracker] = []  # each host's memory (nicsim.exec.cmem)
        self._listeners: list[tuple[socket.socket, str]] = []
        self._threads: list[threading.Thread] = []
        self._clients: list[Client] = []
        self._leaving: set[int] = set()  # programs gone whose objects are being destroyed
        self._closed = False
        self.requests = 0  # requests served (tests, the log)
        # The world's time for the programs' clocks (native/libibverbs/clocks.c), beside the
        # socket: nanoseconds, rewritten after every request.
        self.clock_path = os.path.join(os.path.dirname(path), CLOCK_FILE)
        self._clock: mmap.mmap | None = None

    # -- life ---------------------------------------------------------------------------------

    def start(self, host: str | None = None) -> None:
        """Listen on `path`; with `host`, its programs see only that host's devices."""
        with open(self.clock_path, "wb+") as f:
            f.write(bytes(8))
            f.flush()
            self._clock = mmap.mmap(f.fileno(), 8)
        self.listen(self.path, host)

    def listen(self, path: str, host: str | None = None) -> socket.socket:
        """Serve programs on one more socket, `path` (a shared world has one per host:
        nicsim.exec.shared); with `host`, they see only that host's devices, as a program on
        that machine would."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(path)
            s.listen(16)
        except OSError:
            s.close()
            raise
        self._listeners.append((s, path))
        t = threading.Thread(target=self._accept, args=(s, host), daemon=True,
                             name=f"nicsim-verbs-server-{host or 'all'}")
        t.start()
        self._threads.append(t)
        return s

    @property
    def clients(self) -> int:
        """Programs connected now, or whose exit is still being cleaned up."""
        return len(self._clients) + len(self._leaving)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for listener, path in self._listeners:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
            if path != self.path:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        for c in list(self._clients):
            with contextlib.suppress(OSError):
                c.conn.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(5)
        self.turns.close()
        with self.turns.world():
            if self.world is not None:
                self.world.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def __enter__(self) -> VerbsServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self, listener: socket.socket, host: str | None) -> None:
        while not self._closed:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed
            pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      12))[0]
            client = Client(conn, pid, self.turns.join(pid, []), host=host)
            self._clients.append(client)
            t = threading.Thread(target=self._serve, args=(client,), daemon=True,
                                 name=f"nicsim-verbs-{pid}")
            self._threads.append(t)
            t.start()

    # -- one program ----------------------------------------------------------------------------

    def _serve(self, client: Client) -> None:
        conn = client.conn
        self.turns.serve(client.turn)
        try:
            while True:
                self._await_call(client)
                got = _recv_header(conn)
                if got is None:
                    return
                hdr, client.fds = got
                length, op = _HDR.unpack(hdr)
                if length > MAX_BODY:
                    return  # not our protocol: drop the connection
                body = _recv_exact(conn, length)
                if body is None:
                    return
                try:
                    status, reply = self._request(client, op, body)
                finally:
                    for fd in client.fds:  # (descriptors the request did not take)
                        os.close(fd)
                    client.fds = []
                conn.sendall(_HDR.pack(len(reply), status) + reply)
        except OSError:
            return  # the program went away mid-request
        finally:
            self._gone(client)
            conn.close()

    def _await_call(self, client: Client) -> None:
        """Wait for the program's next call; while none comes, tell whether it sleeps in the
        kernel or spins (nicsim.exec.turns), so that time may pass without it. A spinning
        program that a device write woke runs again until it calls or spins on; a sleeping
        one that wakes and spins without a call is found spinning too."""
        turn, conn, pid = client.turn, client.conn, client.pid

        def calling() -> bool:
            return bool(select.select([conn], [], [], 0)[0])

        cpu, seen = program_cpu_ns(pid), turn.changes
        while not select.select([conn], [], [], QUIET_SLICE_S)[0]:
            phase = turn.phase
            if turn.changes != seen:  # (woken, or made quiet): its CPU counts from here
                cpu, seen = program_cpu_ns(pid), turn.changes
                continue
            if phase is Phase.SPINNING:
                if program_asleep(pid):  # (it has gone to sleep in the kernel since)
                    self.turns.quiet(turn, False, calling)
                continue
            now = program_cpu_ns(pid)
            if now is None or cpu is None:
                self.turns.quiet(turn, False, calling)  # (it is gone: its EOF comes next)
            elif now - cpu >= SPIN_CPU_NS:
                self.turns.quiet(turn, True, calling)
            elif phase is Phase.RUNNING and program_asleep(pid):
                self.turns.quiet(turn, False, calling)
        self.turns.called(turn)

    def _gone(self, client: Client) -> None:
        """The program's exit: its contexts are closed, as the kernel closes its files, which
        destroys every object in them (QPs first, then MRs, CQs, PDs: ib_uverbs'
        cleanup order); its mirrored memory and scratch pages are freed, as exit frees a
        process's memory."""
        if client in self._clients:
            self._clients.remove(client)  # (no request reads its memory from here on)
        self._leaving.add(id(client))  # (it still counts in `clients` until it is torn down)
        try:
            self._tear_down(client)
        finally:
            self._leaving.discard(id(client))
            if client.clock is not None:
                client.clock.close()
            with contextlib.suppress(OSError):
                os.unlink(f"{self.clock_path}.{client.pid}")

    def _tear_down(self, client: Client) -> None:
        with self.turns.world():
            self.turns.leave(client.turn)
            self._as(client)
            try:
                for ctx in client.contexts.values():
                    with contextlib.suppress(PyverbsError):
                        ctx.close()
                self._forget_closed(client)
                for m in client.mirrors.values():
                    m.unmap_all()
                for ctx_id, (va, size) in client.scratch.items():
                    for ctx in client.contexts.values():
                        if id(ctx) == ctx_id:
                            ctx.aspace.munmap(va, size)
            finally:
                pyverbs_process.attach(None)
            for ch in client.channels.values():
                with contextlib.suppress(OSError):
                    os.close(ch.fd)
            client.channels.clear()
            client.contexts.clear()
            client.mirrors.clear()
            client.scratch.clear()

    def _resume(self, turn: Turn) -> None:
        """(Turns) the program of `turn` has the world again in the middle of its request."""
        for c in self._clients:
            if c.turn is turn:
                self._as(c)
                return

    def _as(self, client: Client) -> None:
        if client.process is not None:
            pyverbs_process.attach(client.process)

    def _request(self, client: Client, op: int, body: bytes) -> tuple[int, bytes]:
        handler = _HANDLERS.get(op)
        if handler is None:
            return errno.EOPNOTSUPP, b""
        with self.turns.world():
            self.requests += 1
            if self.world is None:
                self.world = self._make_world()
                self.trackers = [Tracker(h.mem) for h in self.world.hosts.values()]
                self.turns.attach(self.world.env, list(self.world.hosts.values()))
            if client.process is None:
                client.process = CProcess([d for d in devices(self.world)
                                           if client.host in (None, d.host.name)])
                client.turn.mems = [h.mem for name, h in self.world.hosts.items()
                                    if client.host in (None, name)]
                client.clock = _program_clock(self.clock_path, client.pid)
                if client.clock is not None:
                    page = client.clock
                    client.turn.clock = lambda: _I64.unpack_from(page, 0)[0]
            self.turns.settle(client.turn)
            self._catch_up(client)
            self._as(client)
            try:
                # Any request may let the world run (a doorbell, a command, an empty poll):
                # what a peer may read is made current first, what the NIC wrote is
                # copied out after (nicsim.exec.cmem).
                self._copy_remote_readable()
                return 0, handler(self, client, body)
            except Failed as e:
                return e.errno, b""
            except (struct.error, ValueError, KeyError, UnicodeDecodeError):
                return errno.EINVAL, b""
            except PyverbsError as e:
                return _errno(e), b""
            except Exception as e:  # noqa: BLE001 - a bug here must not take the program down
                print(f"nicsim verbs server: {_op_name(op)} from {client.name} "
                      f"(pid {client.pid}) failed: {type(e).__name__}: {e}", file=sys.stderr)
                return errno.EIO, b""
            finally:
                try:
                    self._after_step()
                    self._tell(client)
                finally:
                    pyverbs_process.attach(None)

    def _catch_up(self, client: Client) -> None:
        """The program spent time of its own since its last call (spinning on a clock: its
        clock ran ahead, native/libibverbs/clocks.c): the world lets it pass first."""
        if client.clock is not None and self.world is not None:
            t = _I64.unpack_from(client.clock, 0)[0]
            if t > self.world.env.now:
                self.world.env.advance(t)

    def _after_step(self) -> None:
        """The world ran for waiting or spinning programs: what the NIC wrote goes out to
        them, completion channels with an event become readable, the clocks move: a program
        asleep in the kernel is told the world's time (when it wakes, that time has passed),
        and so is one that a device write woke from spinning (the time it landed); a
        spinning one is not (it may be timing its own loop, perftest's get_cpu_mhz)."""
        self._signal_channels()  # (first: its interrupt handler may let the world run on)
        for t in self.trackers:
            t.flush()
        self._tick()
        for c in self._clients:
            if c.turn.woken or c.turn.phase is Phase.BLOCKED:
                c.turn.woken = False
                self._tell(c)

    def _tick(self) -> None:
        if self._clock is not None and self.world is not None:
            _I64.pack_into(self._clock, 0, int(self.world.env.now))

    def _tell(self, client: Client) -> None:
        """The world's time, to the program's own clock (clocks.c)."""
        if client.clock is not None and self.world is not None:
            _I64.pack_into(client.clock, 8, int(self.world.env.now))

    def _copy_remote_readable(self) -> None:
        for c in self._clients:
            for r in c.mrs.values():
                if r.remote_reads:
                    r.mirror.copy_in(r.va, r.length)

    def _signal_channels(self) -> None:
        """Make each completion channel's fd readable while it has an event: the interrupt
        handler dispatches what the NIC raised (as it runs when the interrupt comes, whoever
        waits), and a channel with an event gets a count on its eventfd, once until the
        program asks for it."""
        serviced: set[int] = set()
        for c in self._clients:
            for ch in c.channels.values():
                if ch.signalled or ch.channel.closed:
                    continue
                dev = ch.channel.ctx.file.dev
                if id(dev) not in serviced:
                    serviced.add(id(dev))
                    dev.events.service()
                if _kernel_channel(ch.channel).events:
                    with contextlib.suppress(OSError):
                        os.write(ch.fd, (1).to_bytes(8, "little"))
                    ch.signalled = True

    def _forget_closed(self, client: Client) -> None:
        """Drop the handles of objects that are gone (closed with their context or parent);
        a gone MR's mirror pages go with it."""
        for h, obj in list(client.objects.items()):
            if getattr(obj, "closed", False):
                del client.objects[h]
                client.cookies.pop(h, None)
                r = client.mrs.pop(h, None)
                if r is not None:
                    r.mirror.unmap(r.va, r.length)
                ch = client.channels.pop(h, None)
                if ch is not None:
                    with contextlib.suppress(OSError):
                        os.close(ch.fd)

    # -- the requests ---------------------------------------------------------------------------

    def _hello(self, client: Client, body: bytes) -> bytes:
        (version,) = _U32.unpack_from(body)
        client.name = body[_U32.size:].decode(errors="replace") or "?"
        if version != VERSION:
            raise Failed(errno.EPROTO)
        return _U32x2.pack(VERSION, os.getpid())

    def _devices(self, client: Client, body: bytes) -> bytes:
        devs = get_device_list()
        return _U32.pack(len(devs)) + b"".join(
            _DEVICE.pack(d.name, d.guid, d.node_type, d.transport_type, d.index)
            for d in devs)

    def _ctx(self, client: Client, handle: int) -> Context:
        ctx = client.contexts.get(handle)
        if ctx is None:
            raise Failed(errno.EBADF)
        return ctx

    def _open(self, client: Client, body: bytes) -> bytes:
        name = body[:NAME_MAX].split(b"\0", 1)[0].decode()
        try:
            ctx = Context(name=name)
        except PyverbsError as e:
            raise Failed(_errno(e, errno.ENODEV)) from None
        handle = client.next_handle
        client.next_handle += 1
        client.contexts[handle] = ctx
        return _U32x2.pack(handle, ctx.num_comp_vectors)

    def _close(self, client: Client, body: bytes) -> bytes:
        (handle,) = _U32.unpack(body)
        ctx = self._ctx(client, handle)
        for ctx_id, (va, size) in list(client.scratch.items()):
            if ctx_id == id(ctx):
                ctx.aspace.munmap(va, size)
                del client.scratch[ctx_id]
        ctx.close()  # (and every object in it, as closing the device file does)
        del client.contexts[handle]
        self._forget_closed(client)
        return b""

    def _query_device(self, client: Client, body: bytes) -> bytes:
        (handle,) = _U32.unpack(body)
        attr = self._ctx(client, handle).query_device_ex()
        fw = str(attr.orig_attr.fw_ver).encode()[:NAME_MAX - 1]
        return _DEV_VALUES.pack(fw, *(_u64(v) for v in _get_device(attr)))

    def _query_port(self, client: Client, body: bytes) -> bytes:
        handle, port = _U32x2.unpack(body)
        attr = self._ctx(client, handle).query_port(port)
        return _PORT_VALUES.pack(*(_u64(v) for v in _get_port(attr)))

    def _query_gid(self, client: Client, body: bytes) -> bytes:
        handle, port, index = _U32x3.unpack(body)
        e = self._ctx(client, handle).query_gid_ex(port, index)
        raw = e.gid_subnet_prefix.to_bytes(8, "big") + e.gid_interface_id.to_bytes(8, "big")
        return _GID.pack(raw, e.gid_type, e.ndev_ifindex)

    def _query_pkey(self, client: Client, body: bytes) -> bytes:
        handle, port, index = _U32x3.unpack(body)
        return _U32.pack(self._ctx(client, handle).query_pkey(port, index))

    def _read_sysfs(self, client: Client, body: bytes) -> bytes:
        assert self.world is not None
        text = sysfs(body.decode(), netdevs(self.world))
        if text is None:
            raise Failed(errno.ENOENT)
        return (text + "\n").encode()

    # -- objects ------------------------------------------------------------------------------

    def _obj(self, client: Client, handle: int, kind: type) -> Any:
        """The client's live object `handle` of `kind`; EINVAL otherwise, as uverbs answers
        a handle that names no such object."""
        obj = client.objects.get(handle)
        if not isinstance(obj, kind) or getattr(obj, "closed", False):
            raise Failed(errno.EINVAL)
        return obj

    def _drop(self, client: Client, handle: int, kind: type) -> None:
        """Destroy object `handle`. One that others still use is EBUSY, as the kernel
        refuses it (ib_dealloc_pd, ib_destroy_cq, a channel with CQs): pyverbs' close()
        would close them with it, which is Python's convenience, not the verb."""
        obj = self._obj(client, handle, kind)
        if obj._children:
            raise Failed(errno.EBUSY)
        obj.close()
        self._forget_closed(client)

    def _alloc_pd(self, client: Client, body: bytes) -> bytes:
        (ctx,) = _U32.unpack(body)
        return _U32.pack(client.handle(PD(self._ctx(client, ctx))))

    def _dealloc_pd(self, client: Client, body: bytes) -> bytes:
        self._drop(client, _U32.unpack(body)[0], PD)
        return b""

    def _mirror(self, client: Client, ctx: Context) -> Mirror:
        m = client.mirrors.get(id(ctx.aspace))
        if m is None:
            tracker = next(t for t in self.trackers if t.mem is ctx.host.mem)
            m = client.mirrors[id(ctx.aspace)] = Mirror(client.pid, ctx.aspace, tracker)
        return m

    def _reg_mr(self, client: Client, body: bytes) -> bytes:
        pd_h, access, addr, length, iova = _REG_MR.unpack(body)
        pd = self._obj(client, pd_h, PD)
        if iova != addr or access & _ACCESS_ON_DEMAND:
            # an MR whose IOVA is not its address, or on-demand paging: the mirror is
            # made at registration, at the program's addresses (nicsim.exec.cmem)
            raise Failed(errno.EOPNOTSUPP)
        if not addr:
            raise Failed(errno.EFAULT)  # (ib_umem_get of address 0)
        mirror = self._mirror(client, pd.ctx)
        try:
            mirror.map(addr, length)
        except MemoryError_ as e:
            raise Failed(e.errno) from None
        try:
            err = mirror.copy_in(addr, length)
            if err:  # not the program's memory: as the kernel's pinning fails
                raise Failed(errno.EFAULT)
            mr = MR(pd, length, access, address=addr)
        except BaseException:
            mirror.unmap(addr, length)
            raise
        h = client.handle(mr)
        client.mrs[h] = Registered(mirror, addr, length, bool(access & _ACCESS_REMOTE_READS))
        return struct.pack("=III", h, mr.lkey, mr.rkey)

    def _dereg_mr(self, client: Client, body: bytes) -> bytes:
        self._drop(client, _U32.unpack(body)[0], MR)
        return b""

    def _create_comp_channel(self, client: Client, body: bytes) -> bytes:
        (ctx,) = _U32.unpack(body)
        if len(client.fds) != 1:
            raise Failed(errno.EINVAL)
        ch = CompChannel(self._ctx(client, ctx))
        h = client.handle(ch)
        client.channels[h] = Channel(ch, client.fds.pop())
        return _U32.pack(h)

    def _destroy_comp_channel(self, client: Client, body: bytes) -> bytes:
        self._drop(client, _U32.unpack(body)[0], CompChannel)
        return b""

    def _create_cq(self, client: Client, body: bytes) -> bytes:
        ctx_h, cqe, ch_h, vector, cookie = _CREATE_CQ.unpack(body)
        ctx = self._ctx(client, ctx_h)
        ch = self._obj(client, ch_h, CompChannel) if ch_h else None
        cq = CQ(ctx, cqe, channel=ch, comp_vector=vector)
        h = client.handle(cq)
        client.cookies[h] = cookie
        return _CQ_REP.pack(h, cq.cqe)

    def _destroy_cq(self, client: Client, body: bytes) -> bytes:
        self._drop(client, _U32.unpack(body)[0], CQ)
        return b""

    def _req_notify_cq(self, client: Client, body: bytes) -> bytes:
        h, solicited = _U32x2.unpack(body)
        self._obj(client, h, CQ).req_notify(bool(solicited))
        return b""

    def _poll_cq(self, client: Client, body: bytes) -> bytes:
        h, n = _U32x2.unpack(body)
        cq = self._obj(client, h, CQ)
        n = max(1, min(n, POLL_MAX))
        _, wcs = cq.poll(n)
        if not wcs and cq._p.silent == 0:
            # The empty poll's window ended because a CQE landed (CQ.poll waits for one and
            # returns empty): take it now. A C program that polls once after arming the CQ
            # (ibv_rc_pingpong -e) would otherwise miss a CQE that landed before the arm
            # reached the NIC, and wait for an event that never comes; on hardware its poll
            # is instantaneous and mlx5's arm carries the consumer index for that race.
            _, wcs = cq.poll(n)
        return b"".join(_WC.pack(w.wr_id, w.status, w.opcode, w.vendor_err, w.byte_len,
                                 w.imm_data, w.qp_num, w.src_qp, w.wc_flags, w.pkey_index,
                                 w.slid, w.sl, w.dlid_path_bits) for w in wcs)

    def _get_cq_event(self, client: Client, body: bytes) -> bytes:
        (h,) = _U32.unpack(body)
        ch = self._obj(client, h, CompChannel)
        client.channels[h].signalled = False  # (the library drained the eventfd)
        kch = _kernel_channel(ch)
        try:
            ch.ctx.file.dev.events.wait(lambda: bool(kch.events), EVENT_WINDOW_NS)
        except EventError as e:
            if e.errno == errno.ETIMEDOUT:
                raise Failed(errno.EAGAIN) from None
            raise Failed(e.errno) from None
        kcq = kch.events[0]
        cq_h, cq = next((k, o) for k, o in client.objects.items()
                        if isinstance(o, CQ) and o.ctx is ch.ctx
                        and o.handle == getattr(kcq, "handle", None))
        ch.get_cq_event(cq)
        return _U64.pack(client.cookies[cq_h])

    def _create_qp(self, client: Client, body: bytes) -> bytes:
        pd_h, scq, rcq, srq, qp_type, sig_all, *cap = _CREATE_QP.unpack(body)
        pd = self._obj(client, pd_h, PD)
        if srq:
            raise Failed(errno.EINVAL)  # (no SRQ can be made yet: no such object)
        attr = QPInitAttr(qp_type=qp_type, scq=self._obj(client, scq, CQ),
                          rcq=self._obj(client, rcq, CQ), cap=QPCap(*cap),
                          sq_sig_all=sig_all)
        qp = QP(pd, attr)
        h = client.handle(qp)
        c = qp.query()[0].cap
        return _QP_REP.pack(h, qp.qp_num, c.max_send_wr, c.max_recv_wr, c.max_send_sge,
                            c.max_recv_sge, c.max_inline_data)

    def _modify_qp(self, client: Client, body: bytes) -> bytes:
        h, mask, *v = _MODIFY_QP.unpack(body)
        self._obj(client, h, QP).modify(_qp_attr(v), mask)
        return b""

    def _query_qp(self, client: Client, body: bytes) -> bytes:
        h, mask = _U32x2.unpack(body)
        qp = self._obj(client, h, QP)
        a, init = qp.query(mask)
        c = a.cap
        return _QUERY_QP_REP.pack(
            a.qp_state, a.cur_qp_state, a.path_mtu, a.path_mig_state, a.qkey, a.rq_psn,
            a.sq_psn, a.dest_qp_num, a.qp_access_flags, c.max_send_wr, c.max_recv_wr,
            c.max_send_sge, c.max_recv_sge, c.max_inline_data, *_ah_values(a.ah_attr),
            *_ah_values(a.alt_ah_attr), a.pkey_index, a.alt_pkey_index,
            a.en_sqd_async_notify, a.sq_draining, a.max_rd_atomic, a.max_dest_rd_atomic,
            a.min_rnr_timer, a.port_num, a.timeout, a.retry_cnt, a.rnr_retry,
            a.alt_port_num, a.alt_timeout, 0, a.rate_limit, int(init.qp_type),
            int(init.sq_sig_all))

    def _destroy_qp(self, client: Client, body: bytes) -> bytes:
        self._drop(client, _U32.unpack(body)[0], QP)
        return b""

    def _create_ah(self, client: Client, body: bytes) -> bytes:
        pd_h, *v = _CREATE_AH.unpack(body)
        return _U32.pack(client.handle(AH(self._obj(client, pd_h, PD), attr=_ah_attr(v))))

    def _destroy_ah(self, client: Client, body: bytes) -> bytes:
        self._drop(client, _U32.unpack(body)[0], AH)
        return b""

    # -- the data path ----------------------------------------------------------------------

    def _scratch(self, client: Client, ctx: Context, size: int) -> int:
        """Server memory in the program's simulated address space for inline data (the
        provider reads an inline WR's bytes from there, at the post)."""
        va, have = client.scratch.get(id(ctx), (0, 0))
        if have < size:
            if have:
                ctx.aspace.munmap(va, have)
            have = max(size, 1 << 16)
            va = ctx.alloc(have)
            client.scratch[id(ctx)] = (va, have)
        return va

    def _post_send(self, client: Client, body: bytes) -> bytes:
        h, n = _U32x2.unpack_from(body)
        qp = self._obj(client, h, QP)
        ud = qp.qp_type == ibv_qp_type.IBV_QPT_UD
        mirror = client.mirrors.get(id(qp.ctx.aspace))
        off = _U32x2.size
        wrs: list[SendWR] = []
        inline: list[tuple[SendWR, bytes]] = []
        bad = 0
        try:
            for _ in range(n):
                (wr_id, opcode, flags, imm, num_sge, raddr, rkey, ah, rqpn, rqkey, cmp_add,
                 swap, inline_len, _) = _SEND_WR.unpack_from(body, off)
                off += _SEND_WR.size
                sges = [SGE(*_SGE.unpack_from(body, off + i * _SGE.size))
                        for i in range(num_sge)]
                off += num_sge * _SGE.size
                wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=num_sge, imm_data=imm,
                            sg=sges, send_flags=flags, remote_addr=raddr, rkey=rkey,
                            compare_add=cmp_add, swap=swap)
                if opcode in _INVALIDATES:
                    wr.invalidate_rkey = imm  # (one union in ibv_send_wr)
                if ud:
                    wr.set_wr_ud(self._obj(client, ah, AH), rqpn, rqkey)
                if inline_len:
                    if off + inline_len > len(body):
                        raise Failed(errno.EINVAL)
                    inline.append((wr, body[off:off + inline_len]))
                    off += inline_len
                elif mirror is not None:
                    for s in sges:  # what the NIC will read: the program's bytes now
                        mirror.copy_in(s.addr, s.length)
                wrs.append(wr)
        except (Failed, struct.error) as e:
            bad = e.errno if isinstance(e, Failed) else errno.EINVAL
        if inline:
            # the bytes the library sent, where the provider reads them: one SGE per WR
            at = self._scratch(client, qp.ctx, sum(len(d) for _, d in inline))
            for wr, data in inline:
                qp.ctx.aspace.write(at, data)
                wr.sg, wr.num_sge = [SGE(at, len(data), 0)], 1
                at += len(data)
        return _POSTED.pack(*self._post(qp, wrs, bad, send=True))

    def _post_recv(self, client: Client, body: bytes) -> bytes:
        h, n = _U32x2.unpack_from(body)
        qp = self._obj(client, h, QP)
        off = _U32x2.size
        wrs: list[RecvWR] = []
        bad = 0
        try:
            for _ in range(n):
                wr_id, num_sge, _ = _RECV_WR.unpack_from(body, off)
                off += _RECV_WR.size
                sges = [SGE(*_SGE.unpack_from(body, off + i * _SGE.size))
                        for i in range(num_sge)]
                off += num_sge * _SGE.size
                wrs.append(RecvWR(wr_id=wr_id, num_sge=num_sge, sg=sges))
        except struct.error:
            bad = errno.EINVAL
        return _POSTED.pack(*self._post(qp, wrs, bad, send=False))

    def _post(self, qp: QP, wrs: list, bad: int, send: bool) -> tuple[int, int]:
        """Post `wrs` as one chain (one doorbell, as the program's one call); the errno of
        the first WR not posted (`bad` if every one of `wrs` was) and how many were."""
        if not wrs:
            return bad, 0
        for a, b in pairwise(wrs):
            a.next_wr = b
        p = qp._p
        before = p.sq_head if send else p.rq_head
        try:
            (qp.post_send if send else qp.post_recv)(wrs[0])
        except PyverbsError as e:
            return _errno(e), (p.sq_head if send else p.rq_head) - before
        return bad, len(wrs)


_HANDLERS: dict[int, Callable[[VerbsServer, Client, bytes], bytes]] = {
    Op.HELLO: VerbsServer._hello,
    Op.DEVICES: VerbsServer._devices,
    Op.OPEN: VerbsServer._open,
    Op.CLOSE: VerbsServer._close,
    Op.QUERY_DEVICE: VerbsServer._query_device,
    Op.QUERY_PORT: VerbsServer._query_port,
    Op.QUERY_GID: VerbsServer._query_gid,
    Op.QUERY_PKEY: VerbsServer._query_pkey,
    Op.READ_SYSFS: VerbsServer._read_sysfs,
    Op.ALLOC_PD: VerbsServer._alloc_pd,
    Op.DEALLOC_PD: VerbsServer._dealloc_pd,
    Op.REG_MR: VerbsServer._reg_mr,
    Op.DEREG_MR: VerbsServer._dereg_mr,
    Op.CREATE_COMP_CHANNEL: VerbsServer._create_comp_channel,
    Op.DESTROY_COMP_CHANNEL: VerbsServer._destroy_comp_channel,
    Op.CREATE_CQ: VerbsServer._create_cq,
    Op.DESTROY_CQ: VerbsServer._destroy_cq,
    Op.REQ_NOTIFY_CQ: VerbsServer._req_notify_cq,
    Op.POLL_CQ: VerbsServer._poll_cq,
    Op.GET_CQ_EVENT: VerbsServer._get_cq_event,
    Op.CREATE_QP: VerbsServer._create_qp,
    Op.MODIFY_QP: VerbsServer._modify_qp,
    Op.QUERY_QP: VerbsServer._query_qp,
    Op.DESTROY_QP: VerbsServer._destroy_qp,
    Op.CREATE_AH: VerbsServer._create_ah,
    Op.DESTROY_AH: VerbsServer._destroy_ah,
    Op.POST_SEND: VerbsServer._post_send,
    Op.POST_RECV: VerbsServer._post_recv,
}


def _op_name(op: int) -> str:
    try:
        return Op(op).name
    except ValueError:
        return str(op)


def _kernel_channel(ch: CompChannel) -> KernelChannel:
    """The kernel's side of a completion channel (its queue of events): the server waits on
    it for a bounded window, which pyverbs' get_cq_event (a blocking read) does not offer."""
    return ch.ctx.file.uctx.get(ch.handle, KernelChannel)  # type: ignore[no-any-return]


def _ah_attr(v: list | tuple) -> AHAttr:
    """struct nsrpc_ah_attr's values as pyverbs' AHAttr."""
    dgid, flow, sgid_index, hop, tclass, is_global, dlid, sl, path_bits, rate, port = v
    return AHAttr(dlid=dlid, sl=sl, src_path_bits=path_bits, static_rate=rate,
                  is_global=is_global, port_num=port,
                  gr=GlobalRoute(dgid=GID(dgid), flow_label=flow, sgid_index=sgid_index,
                                 hop_limit=hop, traffic_class=tclass))


def _ah_values(a: AHAttr | None) -> tuple:
    if a is None:
        return (bytes(16), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    gr = a.gr
    dgid = gr.dgid.raw if gr is not None and gr.dgid is not None else bytes(16)
    return (dgid, gr.flow_label if gr else 0, gr.sgid_index if gr else 0,
            gr.hop_limit if gr else 0, gr.traffic_class if gr else 0, int(a.is_global),
            int(a.dlid), a.sl, a.src_path_bits, a.static_rate, a.port_num)


_AH_N = 11  # values of one struct nsrpc_ah_attr


def _qp_attr(v: list) -> QPAttr:
    """struct nsrpc_qp_attr's values (after the handle and mask) as pyverbs' QPAttr."""
    (state, cur, mtu, mig, qkey, rq_psn, sq_psn, dqpn, access, *rest) = v
    cap, rest = QPCap(*rest[:5]), rest[5:]
    ah, alt, rest = _ah_attr(rest[:_AH_N]), _ah_attr(rest[_AH_N:2 * _AH_N]), rest[2 * _AH_N:]
    (pkey, alt_pkey, sqd_notify, draining, rd_atomic, dest_rd_atomic, rnr_timer, port,
     timeout, retry, rnr_retry, alt_port, alt_timeout, _reserved, rate_limit) = rest
    return QPAttr(qp_state=state, cur_qp_state=cur, path_mtu=mtu, qp_access_flags=access,
                  pkey_index=pkey, port_num=port, qkey=qkey, dest_qp_num=dqpn, rq_psn=rq_psn,
                  sq_psn=sq_psn, max_rd_atomic=rd_atomic, max_dest_rd_atomic=dest_rd_atomic,
                  min_rnr_timer=rnr_timer, timeout=timeout, retry_cnt=retry,
                  rnr_retry=rnr_retry, ah_attr=ah, cap=cap, path_mig_state=mig,
                  en_sqd_async_notify=sqd_notify, sq_draining=draining, alt_ah_attr=alt,
                  alt_pkey_index=alt_pkey, alt_port_num=alt_port, alt_timeout=alt_timeout,
                  rate_limit=rate_limit)


def _recv_header(conn: socket.socket) -> tuple[bytes, list[int]] | None:
    """A request's header and the descriptors that came with it (SCM_RIGHTS: a completion
    channel's eventfd), or None at the end of the stream."""
    data, fds, _flags, _addr = socket.recv_fds(conn, _HDR.size, 4,
                                               socket.MSG_CMSG_CLOEXEC)
    if not data:
        for fd in fds:
            os.close(fd)
        return None
    if len(data) < _HDR.size:
        rest = _recv_exact(conn, _HDR.size - len(data))
        if rest is None:
            for fd in fds:
                os.close(fd)
            return None
        data += rest
    return data, list(fds)


def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
    """n bytes, or None at the end of the stream (the program closed its side)."""
    buf = bytearray()
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def serve_in_thread(path: str, world: Callable[[], World]) -> VerbsServer:
    """A started server (nicsim exec's, for the one program it runs)."""
    server = VerbsServer(path, world)
    server.start()
    return server
