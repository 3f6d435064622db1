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

Phase 1 (this module) carries the device and port queries; requests are served one at a
time under a lock. The design it is built for (docs/explanation/c-programs.md): several
`nicsim exec --world NAME` commands attach to one server per named world; every request is
a scheduling point of nicsim.driver.sched (each program a flow), so simulated time passes
only when every program waits; registered memory is reached in the program's address space
(process_vm_readv/writev, or memory the program shares with the server).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from operator import attrgetter

from nicsim.driver.user import process as pyverbs_process
from nicsim.driver.user.device import get_device_list
from nicsim.driver.user.errors import PyverbsError
from nicsim.driver.user.verbs import Context
from nicsim.exec.answers import sysfs
from nicsim.exec.world import devices, netdevs
from nicsim.world import World

VERSION = 1  # NSRPC_VERSION
SOCKET_ENV = "NICSIM_VERBS_SOCKET"  # NSRPC_SOCKET_ENV: where the C library connects
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


class Failed(Exception):
    """A request's errno (the reply's status)."""

    def __init__(self, err: int) -> None:
        super().__init__(os.strerror(err))
        self.errno = err


@dataclass
class Client:
    """One connected program."""

    conn: socket.socket
    pid: int
    name: str = "?"
    process: pyverbs_process.Process | None = None
    contexts: dict[int, Context] = field(default_factory=dict)
    next_handle: int = 1


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
        self._lock = threading.Lock()  # one request at a time touches the world
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._clients: list[Client] = []
        self._closed = False
        self.requests = 0  # requests served (tests, the log)

    # -- life ---------------------------------------------------------------------------------

    def start(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(self.path)
            s.listen(16)
        except OSError:
            s.close()
            raise
        self._listener = s
        t = threading.Thread(target=self._accept, name="nicsim-verbs-server", daemon=True)
        t.start()
        self._threads.append(t)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        for c in list(self._clients):
            with contextlib.suppress(OSError):
                c.conn.shutdown(socket.SHUT_RDWR)
        for t in self._threads:
            t.join(5)
        with self._lock:
            if self.world is not None:
                self.world.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def __enter__(self) -> VerbsServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            pid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      12))[0]
            client = Client(conn, pid)
            self._clients.append(client)
            t = threading.Thread(target=self._serve, args=(client,), daemon=True,
                                 name=f"nicsim-verbs-{pid}")
            self._threads.append(t)
            t.start()

    # -- one program ----------------------------------------------------------------------------

    def _serve(self, client: Client) -> None:
        conn = client.conn
        try:
            while True:
                hdr = _recv_exact(conn, _HDR.size)
                if hdr is None:
                    return
                length, op = _HDR.unpack(hdr)
                if length > MAX_BODY:
                    return  # not our protocol: drop the connection
                body = _recv_exact(conn, length)
                if body is None:
                    return
                status, reply = self._request(client, op, body)
                conn.sendall(_HDR.pack(len(reply), status) + reply)
        except OSError:
            return  # the program went away mid-request
        finally:
            self._gone(client)
            conn.close()

    def _gone(self, client: Client) -> None:
        """The program's exit: its contexts are closed, as the kernel closes its files."""
        if client in self._clients:
            self._clients.remove(client)
        with self._lock:
            self._as(client)
            try:
                for ctx in client.contexts.values():
                    with contextlib.suppress(PyverbsError):
                        ctx.close()
            finally:
                pyverbs_process.attach(None)
            client.contexts.clear()

    def _as(self, client: Client) -> None:
        if client.process is not None:
            pyverbs_process.attach(client.process)

    def _request(self, client: Client, op: int, body: bytes) -> tuple[int, bytes]:
        handler = _HANDLERS.get(op)
        if handler is None:
            return errno.EOPNOTSUPP, b""
        with self._lock:
            self.requests += 1
            if self.world is None:
                self.world = self._make_world()
            if client.process is None:
                client.process = pyverbs_process.Process(devices(self.world))
            self._as(client)
            try:
                return 0, handler(self, client, body)
            except Failed as e:
                return e.errno, b""
            except (struct.error, ValueError, KeyError, UnicodeDecodeError):
                return errno.EINVAL, b""
            except PyverbsError as e:
                return _errno(e), b""
            except Exception as e:  # noqa: BLE001 - a bug here must not take the program down
                print(f"nicsim verbs server: {Op(op).name} from {client.name} "
                      f"(pid {client.pid}) failed: {type(e).__name__}: {e}", file=sys.stderr)
                return errno.EIO, b""
            finally:
                pyverbs_process.attach(None)

    # -- the requests ---------------------------------------------------------------------------

    def _hello(self, client: Client, body: bytes) -> bytes:
        (version,) = _U32.unpack_from(body)
        client.name = body[_U32.size:].decode(errors="replace") or "?"
        if version != VERSION:
            raise Failed(errno.EPROTO)
        return _U32.pack(VERSION)

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
        self._ctx(client, handle).close()
        del client.contexts[handle]
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
}


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
