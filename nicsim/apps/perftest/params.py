"""perftest's command line: the tools, their flags and defaults, and its errors.

The defaults and the dependencies between flags are perftest's (perftest_parameters.h and
force_dependecies in perftest_parameters.c): 5000 iterations for ib_write_bw and 1000 for the
others, 64 KiB for bandwidth and 2 B for latency tests, TX depth 128 (bandwidth) or 1
(latency) capped by the iterations, CQ moderation 100 capped by the TX depth and switched
off above 8 KiB, 8-byte atomics. A flag perftest does not know, or one nicsim cannot honour,
fails the way perftest fails: its message on stderr and exit status 1.
"""

from __future__ import annotations

import getopt
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from pathlib import Path


class Verb(StrEnum):
    """perftest's verbs, named as its header line names them (testsStr)."""

    SEND = "Send"
    WRITE = "RDMA_Write"
    READ = "RDMA_Read"
    ATOMIC = "Atomic"


class TestKind(Enum):
    BW = "BW"
    LAT = "Latency"


class Conn(StrEnum):
    RC = "RC"
    UC = "UC"
    UD = "UD"


class AtomicType(StrEnum):
    CMP_AND_SWAP = "CMP_AND_SWAP"
    FETCH_AND_ADD = "FETCH_AND_ADD"


TOOLS: dict[str, tuple[Verb, TestKind]] = {
    "ib_write_bw": (Verb.WRITE, TestKind.BW),
    "ib_write_lat": (Verb.WRITE, TestKind.LAT),
    "ib_send_bw": (Verb.SEND, TestKind.BW),
    "ib_send_lat": (Verb.SEND, TestKind.LAT),
    "ib_read_bw": (Verb.READ, TestKind.BW),
    "ib_read_lat": (Verb.READ, TestKind.LAT),
    "ib_atomic_bw": (Verb.ATOMIC, TestKind.BW),
    "ib_atomic_lat": (Verb.ATOMIC, TestKind.LAT),
}

MAX_SIZE = 8 << 20  # the largest size of -a (perftest's MAX_SIZE)
ATOMIC_SIZE = 8
CQ_MOD_LIMIT = 8192  # above this message size CQ moderation is off unless asked (-Q)
MAX_INLINE = 1024
DEF_CQ_MOD = 100
DEF_RX_SEND = 512
CQE_POLL_BATCH = 16  # completions one poll asks for (perftest's CTX_POLL_BATCH)


class PerftestError(Exception):
    """perftest refused: `lines` go to stderr, the exit status is `code` (perftest's 1)."""

    def __init__(self, *lines: str, code: int = 1, stdout: str = "") -> None:
        super().__init__("\n".join(lines))
        self.lines = lines
        self.code = code
        self.stdout = stdout  # what perftest prints on stdout before failing (a dashed line)


class HelpExit(Exception):
    """-h: the usage text was asked for."""


@dataclass
class Params:
    tool: str
    verb: Verb
    kind: TestKind
    size: int
    iters: int
    tx_depth: int
    rx_depth: int
    cq_mod: int
    all_sizes: bool = False
    duration: int | None = None  # -D: seconds of simulated time
    margin: int = 0  # seconds before and after the sampled window of a duration run
    num_qps: int = 1
    inline: int = -1  # -1: the device's default for this test (perftest's DEF_INLINE)
    mtu: int = 0  # 0: the port's active MTU
    cpu_freq_f: bool = False
    report_gbits: bool = False
    rdma_cm: bool = False
    gid_index: int | None = None
    conn: Conn = Conn.RC
    out_json: bool = False
    out_json_file: str = "perftest_out.json"
    no_peak: bool = False
    atomic_type: AtomicType = AtomicType.FETCH_AND_ADD
    out_reads: int = 0  # 0: the device's max_qp_rd_atom
    req_cq_mod: bool = False
    duplex: bool = False  # -b: both ends send (perftest's duplex)
    server: str | None = None
    # nicsim's own options
    profile: str | None = None
    host_profile: str | None = None
    breakdown: bool = False
    check: bool = False  # the physics checker (nicsim.checks.physics)
    waterfall: str | None = None  # a PNG of one WR's stages (implies breakdown)
    seed: int = 1
    server_output: str | None = None  # where the server's stdout goes ("-": after ours)
    size_cap: int | None = None  # UD: no message beyond the path MTU
    warnings: list[str] = field(default_factory=list)  # stdout lines perftest prints first
    server_warnings: list[str] = field(default_factory=list)  # the server's, likewise

    @property
    def sizes(self) -> list[int]:
        """The message sizes of the run: 2 B to 8 MiB by powers of two with -a."""
        if self.verb is Verb.ATOMIC:
            return [ATOMIC_SIZE]
        if self.all_sizes:
            return [1 << i for i in range(1, 24) if self.size_cap is None
                    or 1 << i <= self.size_cap]
        return [self.size if self.size_cap is None else min(self.size, self.size_cap)]


_SHORT = "hs:abn:D:q:t:I:m:FRx:c:Q:NA:o:r:p:d:i:u:"
_LONG = ["help", "size=", "all", "iters=", "duration=", "qp=", "tx-depth=", "inline_size=",
         "mtu=", "CPU-freq", "report_gbits", "rdma_cm", "gid-index=", "connection=",
         "cq-mod=", "noPeak", "atomic_type=", "outs=", "rx-depth=", "port=", "ib-dev=",
         "ib-port=", "out_json", "out_json_file=", "profile=", "host-profile=", "breakdown",
         "seed=", "waterfall=", "check", "bidirectional", "server-output="]


def _int(opt: str, text: str, name: str, lo: int | None = None, hi: int | None = None,
         kind: str = "int") -> int:
    """perftest's CHECK_VALUE family: strtol with base 0, then the range."""
    try:
        v = int(text, 0)
    except ValueError:
        raise PerftestError(f" {name} argument {text} should be {kind}") from None
    if lo is not None and hi is not None and not lo <= v <= hi:
        raise PerftestError(f" {name} should be between {lo} and {hi}")
    return v


def _size(text: str) -> int:
    factor = 1
    if text.endswith("K"):
        text, factor = text[:-1], 1024
    elif text.endswith("M"):
        text, factor = text[:-1], 1 << 20
    try:
        v = int(text, 0) * factor
    except ValueError:
        v = 0  # strtol of text that is no number is 0, which the range check refuses
    if not 1 <= v <= 0xFFFFFFFF // 2:
        raise PerftestError(f" Message Size should be between 1 and {0xFFFFFFFF // 2}")
    return v


def _getopt_error(tool: str, e: getopt.GetoptError) -> PerftestError:
    """glibc getopt's line for the option, then perftest's two lines."""
    opt = e.opt
    if "requires argument" in e.msg or "requires an argument" in e.msg:
        first = (f"{tool}: option '--{opt}' requires an argument" if len(opt) > 1
                 else f"{tool}: option requires an argument -- '{opt}'")
    elif "must not have an argument" in e.msg:
        first = f"{tool}: option '--{opt}' doesn't allow an argument"
    elif len(opt) > 1 or e.msg.startswith("option --"):
        first = f"{tool}: unrecognized option '--{opt}'"
    else:
        first = f"{tool}: invalid option -- '{opt}'"
    return PerftestError(first, " Invalid Command or flag.",
                         " Please check command line and run again.", "",
                         " Parser function exited with Error")


def parse(tool: str, argv: list[str]) -> Params:
    if tool not in TOOLS:
        raise PerftestError(f"nicsim perftest: unknown tool {tool!r} (tools: "
                            f"{', '.join(TOOLS)})", code=2)
    verb, kind = TOOLS[tool]
    try:
        opts, rest = getopt.gnu_getopt(argv, _SHORT, _LONG)
    except getopt.GetoptError as e:
        raise _getopt_error(tool, e) from None
    p = Params(tool, verb, kind,
               size=ATOMIC_SIZE if verb is Verb.ATOMIC else (65536 if kind is TestKind.BW
                                                              else 2),
               iters=5000 if (verb is Verb.WRITE and kind is TestKind.BW) else 1000,
               tx_depth=128 if kind is TestKind.BW else 1,
               rx_depth=DEF_RX_SEND if verb in (Verb.SEND, Verb.WRITE) else 1,
               cq_mod=DEF_CQ_MOD)
    size_given = False
    conn_arg: str | None = None
    fail = " Parser function exited with Error"
    try:
        for o, a in opts:
            if o in ("-h", "--help"):
                raise HelpExit
            elif o in ("-s", "--size"):
                p.size, size_given = _size(a), True
            elif o in ("-a", "--all"):
                p.all_sizes = True
            elif o in ("-b", "--bidirectional"):
                if kind is TestKind.LAT:
                    raise PerftestError(" Bidirectional is only available in BW test")
                p.duplex = True
            elif o in ("-n", "--iters"):
                p.iters = _int(o, a, "Iteration num", 5, 1 << 32, "uint64_t")
            elif o in ("-D", "--duration"):
                p.duration = _int(o, a, "Duration period")
                if p.duration <= 0:
                    raise PerftestError(" Duration period must be positive")
            elif o in ("-q", "--qp"):
                p.num_qps = _int(o, a, "num of Qps", 1, 16384)
            elif o in ("-t", "--tx-depth"):
                p.tx_depth = _int(o, a, "Tx depth", 1, 15000)
            elif o in ("-I", "--inline_size"):
                p.inline = _int(o, a, "Max inline", 0, MAX_INLINE)
            elif o in ("-m", "--mtu"):
                p.mtu = _int(o, a, "MTU")
            elif o in ("-F", "--CPU-freq"):
                p.cpu_freq_f = True
            elif o == "--report_gbits":
                p.report_gbits = True
            elif o in ("-R", "--rdma_cm"):
                p.rdma_cm = True
            elif o in ("-x", "--gid-index"):
                p.gid_index = _int(o, a, "Gid index", 0, 64, "uint8_t")
            elif o in ("-c", "--connection"):
                conn_arg = a
            elif o in ("-Q", "--cq-mod"):
                p.cq_mod, p.req_cq_mod = _int(o, a, "CQ moderation", 1, 1024), True
            elif o in ("-N", "--noPeak"):
                p.no_peak = True
            elif o in ("-A", "--atomic_type"):
                if verb is not Verb.ATOMIC:
                    raise PerftestError(" You are not running the atomic_lat/bw test!",
                                        " To change the atomic action type, you must run "
                                        "one of the atomic tests")
                try:
                    p.atomic_type = AtomicType(a)
                except ValueError:
                    raise PerftestError(" Invalid Atomic type! please choose from "
                                        "{CMP_AND_SWAP,FETCH_AND_ADD}") from None
            elif o in ("-o", "--outs"):
                p.out_reads = _int(o, a, "Outstanding Reads")
            elif o in ("-r", "--rx-depth"):
                p.rx_depth = _int(o, a, " Rx depth", 1, 16384)
            elif o in ("-p", "--port", "-d", "--ib-dev", "-i", "--ib-port", "-u"):
                pass  # the TCP port, device and port: one device, no socket in a simulation
            elif o == "--out_json":
                p.out_json = True
            elif o == "--out_json_file":
                p.out_json, p.out_json_file = True, a
            elif o == "--profile":
                p.profile = a
            elif o == "--host-profile":
                p.host_profile = a
            elif o == "--breakdown":
                p.breakdown = True
            elif o == "--check":
                p.check = True
            elif o == "--waterfall":
                p.breakdown, p.waterfall = True, a
            elif o == "--seed":
                p.seed = _int(o, a, "Seed")
            elif o == "--server-output":
                p.server_output = a
    except PerftestError as e:
        if e.lines[-1] != fail and e.code == 1:
            raise PerftestError(*e.lines, fail) from None
        raise
    if len(rest) > 1:
        raise PerftestError(f" Invalid Command line. Please check command rerun ({rest[1]}: "
                            f"one server name at most)", fail)
    p.server = rest[0] if rest else None
    if conn_arg is not None:
        p.conn = _conn(conn_arg, verb)
    _dependencies(p, size_given)
    _outputs(p)
    return p


# What --waterfall can write (matplotlib's formats that make sense for a figure).
_FIGURE_FORMATS = (".png", ".pdf", ".svg", ".jpg", ".jpeg")


def _outputs(p: Params) -> None:
    """Files nicsim's options write go into directories that exist, in formats it writes:
    said before the run, in one line, not after it as a traceback."""
    files = [("--out_json_file", p.out_json_file)] if p.out_json else []
    if p.server_output not in (None, "-"):
        files.append(("--server-output", str(p.server_output)))
    for opt, path in files:
        if not Path(path).resolve().parent.is_dir():
            raise PerftestError(f"nicsim perftest: {opt} {path}: directory "
                                f"{Path(path).parent} does not exist", code=2)
    if p.waterfall is not None:
        w = Path(p.waterfall)
        if w.suffix.lower() not in _FIGURE_FORMATS:
            raise PerftestError(f"nicsim perftest: --waterfall {w}: a figure file "
                                f"({', '.join(_FIGURE_FORMATS)})", code=2)
        if not w.resolve().parent.is_dir():
            raise PerftestError(f"nicsim perftest: --waterfall {w}: directory {w.parent} "
                                f"does not exist", code=2)


def _conn(text: str, verb: Verb) -> Conn:
    if text in ("RawEth", "XRC", "DC", "SRD"):
        raise PerftestError(f" {text} connections are not supported by nicsim's perftest "
                            f"(the simulated NIC has RC, UC and UD QPs)")
    try:
        c = Conn(text)
    except ValueError:
        raise PerftestError(" Invalid Connection type. Please choose from "
                            "{RC,UC,UD,XRC,DC,SRD}") from None
    if c is Conn.UC and verb in (Verb.READ, Verb.ATOMIC):
        raise PerftestError(" UC connection not possible in READ/ATOMIC verbs")
    if c is Conn.UD and verb is not Verb.SEND:
        raise PerftestError(" UD connection only possible in SEND verb")
    return c


def _dependencies(p: Params, size_given: bool) -> None:
    """perftest's force_dependecies, for the flags nicsim takes."""
    dash = "-" * 87
    if p.verb is Verb.WRITE:
        p.rx_depth = 1
    if p.duration is None:
        p.tx_depth = min(p.tx_depth, p.iters)
        if p.verb is Verb.SEND:
            p.rx_depth = min(p.rx_depth, p.iters)
    if p.conn in (Conn.UD, Conn.UC) and p.rx_depth == DEF_RX_SEND:
        p.rx_depth = min(p.iters, 16000)
    size = MAX_SIZE if p.all_sizes else p.size
    if size > CQ_MOD_LIMIT and p.conn is not Conn.UD and not p.all_sizes:
        if not p.req_cq_mod:
            p.cq_mod = 1
        elif p.cq_mod > 1:
            p.warnings += [dash, "Warning: Large message requested and CQ moderation enabled",
                           "Warning: It can lead to inaccurate results"]
    p.cq_mod = min(p.cq_mod, p.tx_depth)
    if p.verb is Verb.ATOMIC and size_given and p.size != ATOMIC_SIZE:
        raise PerftestError("Message size cannot be changed for Atomic tests ", stdout=dash)
    if p.duration is not None:
        if p.no_peak is False and p.kind is TestKind.BW:
            p.warnings.append(" WARNING: BW peak won't be measured in this run.")
        p.no_peak = True
        if p.all_sizes:
            raise PerftestError("Duration mode currently doesn't support running on all "
                                "sizes.", stdout=dash)
    if p.duration is not None:
        p.margin = p.duration // 4  # perftest's default margin (DEF_INIT_MARGIN)
    # The server parses the same flags, and a unidirectional SEND server measures no peak
    # (it sees receives, not its posts): it says so where the client says nothing.
    p.server_warnings = list(p.warnings)
    peakless_server = p.verb is Verb.SEND and p.kind is TestKind.BW and not p.duplex
    if peakless_server and not p.no_peak:
        p.server_warnings.append(" WARNING: BW peak won't be measured in this run.")
    if p.duration is None and p.iters > 20000 and not p.no_peak and p.kind is TestKind.BW:
        p.warnings.append(" WARNING: BW peak won't be measured in this run.")
        if not peakless_server:
            p.server_warnings.append(p.warnings[-1])
        p.no_peak = True
    if p.verb is Verb.SEND and p.rx_depth % 2 == 1 and not p.all_sizes and p.duration is None:
        p.rx_depth += 1
    if p.verb in (Verb.READ, Verb.ATOMIC):
        p.inline = 0
