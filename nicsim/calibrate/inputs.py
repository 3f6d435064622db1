"""Reading perftest's outputs: its text as the client prints it, and its --out_json files.

Each row of a result table becomes a Figure: the tool and the flags that shaped the run (as
the header block reports them: connection type, MTU, TX depth, inline size, QPs, CQ
moderation, outstanding reads, bidirectional, atomic type), the message size and one metric
with its published value. The flags are taken from what perftest printed, not from the
command the user typed (which the output does not hold): the header is what the run used.
Anything that is not such an output is refused with one line naming the file and what is
wrong (InputError).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nicsim.apps.perftest.params import TOOLS, TestKind, Verb

# One reported unit of bandwidth in Gb/s: perftest's MiB/sec (its older "MB/sec" is the same
# 0x100000 bytes) and --report_gbits's Gb/sec.
_UNITS = {"Gb/sec": 1.0, "MiB/sec": 0x100000 * 8 / 1e9, "MB/sec": 0x100000 * 8 / 1e9}
_VERBS = {v.value: v for v in Verb}
_METRIC_UNITS = {"bw_gbps": "Gb/s", "msg_rate_mpps": "Mpps", "t_typical_us": "us",
                 "t_avg_us": "us"}
# Below this size a bandwidth row is shown as its message rate: the rate is what the per-WQE
# costs decide there (the ratio simulated/published is the same either way).
RATE_BELOW = 1024


class InputError(ValueError):
    """An input that cannot be used: one line naming the file and what is wrong."""


@dataclass
class Figure:
    """One published number: a row of a perftest table and the run that made it."""

    file: str
    tool: str
    flags: list[str]  # perftest flags that reproduce the run, without -s, -n and --profile
    size: int
    metric: str  # bw_gbps, msg_rate_mpps, t_typical_us or t_avg_us
    value: float
    iters: int  # the published run's iterations (not used in the simulation)
    notes: list[str] = field(default_factory=list)

    @property
    def kind(self) -> TestKind:
        return TOOLS[self.tool][1]

    @property
    def label(self) -> str:
        """A short name: file, tool, size and metric."""
        return f"{Path(self.file).name}: {self.tool} {_size(self.size)} {self.metric}"

    @property
    def unit(self) -> str:
        return _METRIC_UNITS[self.metric]

    def command(self) -> str:
        return " ".join(["nicsim perftest", self.tool, "-s", str(self.size), *self.flags])


def _size(n: int) -> str:
    for shift, suffix in ((20, "MiB"), (10, "KiB")):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {suffix}"
    return f"{n} B"


def read_inputs(paths: list[str]) -> list[Figure]:
    """Every figure of every file, in order; the first unusable file raises InputError."""
    out: list[Figure] = []
    for p in paths:
        out += read_file(p)
    return out


def read_file(path: str) -> list[Figure]:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a perftest output") from None
    except OSError as e:
        raise InputError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not text (a perftest output or its --out_json file "
                         f"is)") from None
    if not text.strip():
        raise InputError(f"{path}: empty (expected perftest's output or its --out_json file)")
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None
        return _from_json(path, doc)
    return _from_text(path, text)


# -- the tool and its flags ----------------------------------------------------------------

def _tool(path: str, name: str) -> tuple[str, list[str]]:
    """The tool from a test's name (e.g. RDMA_Write BW Test, Atomic FETCH_AND_ADD Latency
    Test, Send Bidirectional BW Test; the JSON's test_info.test has '_' for every space) and
    the flags the name implies."""
    text = " ".join(name.replace("_", " ").split())
    for joined in ("RDMA_Write", "RDMA_Read", "CMP_AND_SWAP", "FETCH_AND_ADD"):
        text = text.replace(joined.replace("_", " "), joined)
    words = text.split()
    flags: list[str] = []
    verb = next((_VERBS[w] for w in words if w in _VERBS), None)
    kind = TestKind.BW if "BW" in words else TestKind.LAT if "Latency" in words else None
    if verb is None or kind is None:
        raise InputError(f"{path}: test {text!r}: not one of perftest's tests "
                         f"(Send, RDMA_Write, RDMA_Read, Atomic; BW or Latency)")
    if "Bidirectional" in words:
        flags.append("-b")
    for w in words:
        if w in ("CMP_AND_SWAP", "FETCH_AND_ADD"):
            flags += ["-A", w]
    tool = next(t for t, vk in TOOLS.items() if vk == (verb, kind))
    return tool, flags


def _header_flags(path: str, tool: str, info: dict[str, str]) -> list[str]:
    """perftest flags from the header's fields (keys as the text prints them)."""
    verb, kind = TOOLS[tool]
    flags: list[str] = []

    def num(key: str) -> int | None:
        v = info.get(key)
        if v is None:
            return None
        m = re.match(r"\s*(\d+)", str(v))
        if not m:
            raise InputError(f"{path}: header field {key!r}: {v!r} is not a number")
        return int(m.group(1))

    conn = info.get("Connection type")
    if conn is not None:
        flags += ["-c", str(conn).strip()]
    for key, flag in (("Number of qps", "-q"), ("Mtu", "-m")):
        v = num(key)
        if v is not None:
            flags += [flag, str(v)]
    if kind is TestKind.BW:
        for key, flag in (("TX depth", "-t"), ("CQ Moderation", "-Q")):
            v = num(key)
            if v is not None:
                flags += [flag, str(v)]
        rx = num("RX depth")
        if rx is not None and verb is Verb.SEND:
            flags += ["-r", str(rx)]
    if verb in (Verb.READ, Verb.ATOMIC):
        v = num("Outstand reads")
        if v is not None:
            flags += ["-o", str(v)]
    else:
        v = num("Max inline data")
        if v is not None:
            flags += ["-I", str(v)]
    return flags


# -- text ------------------------------------------------------------------------------------

_COLUMN = re.compile(r"#bytes|#iterations|BW peak\[([^\]]+)\]|BW average\[([^\]]+)\]|"
                     r"MsgRate\[Mpps\]|t_min\[usec\]|t_max\[usec\]|t_typical\[usec\]|"
                     r"t_avg\[usec\]|t_stdev\[usec\]|99% percentile\[usec\]|"
                     r"99\.9% percentile\[usec\]|tps average")
_FIELD = re.compile(r"^\s*([A-Za-z][A-Za-z .*]*?)\s*:\s*(\S.*?)\s*$")


def _from_text(path: str, text: str) -> list[Figure]:
    lines = text.splitlines()
    if any("Waiting for client to connect" in ln for ln in lines):
        raise InputError(f"{path}: perftest's server output; give the client's (the end "
                         f"that names the server on its command line)")
    title = None
    for ln in lines:
        words = ln.split()
        if len(words) >= 3 and words[-1] == "Test" and words[-2] in ("BW", "Latency"):
            title = words
            break
    if title is None:
        raise InputError(f"{path}: not perftest output (no test name such as 'RDMA_Write BW "
                         f"Test' in a header block)")
    tool, flags = _tool(path, " ".join(title))
    info: dict[str, str] = {}
    for ln in lines:
        # header lines hold two fields each, tab-separated ("Mtu : 4096[B]\t\tLink type ...")
        for part in re.split(r"\t+", ln):
            m = _FIELD.match(part)
            if m and not part.strip().startswith(("#", "local", "remote", "GID")):
                info.setdefault(m.group(1).strip(), m.group(2))
    flags += _header_flags(path, tool, info)
    head_at = next((i for i, ln in enumerate(lines) if "#bytes" in ln), None)
    if head_at is None:
        raise InputError(f"{path}: {tool}: no result table (no '#bytes' line: the run "
                         f"failed or the output is cut short)")
    cols, units = _columns(lines[head_at])
    figures = []
    for ln in lines[head_at + 1:]:
        words = ln.split()
        if not words or not re.fullmatch(r"\d+", words[0]):
            if figures:
                break  # (the dashed line under the table)
            continue
        if len(words) < len(cols):
            raise InputError(f"{path}: row {ln.strip()!r}: {len(words)} values for "
                             f"{len(cols)} columns")
        try:
            row = {c: float(w) for c, w in zip(cols, words, strict=False)}
        except ValueError:
            raise InputError(f"{path}: row {ln.strip()!r}: not numbers") from None
        figures.append(_figure(path, tool, flags, row, units))
    if not figures:
        raise InputError(f"{path}: {tool}: the result table has no rows (the run failed or "
                         f"the output is cut short)")
    return figures


def _columns(header: str) -> tuple[list[str], dict[str, float]]:
    cols: list[str] = []
    units: dict[str, float] = {}
    for m in _COLUMN.finditer(header):
        name = re.sub(r"\[.*", "", m.group(0))
        cols.append(name)
        unit = m.group(1) or m.group(2)
        if unit is not None:
            units[name] = _UNITS.get(unit, float("nan"))
    return cols, units


def _figure(path: str, tool: str, flags: list[str], row: dict[str, float],
            units: dict[str, float]) -> Figure:
    """The metric of one table row: the BW average (in Gb/s; shown as the message rate for
    small messages) for BW tests, t_typical (the median) for latency tests, t_avg where the
    table has no t_typical (a duration run)."""
    size, iters = int(row["#bytes"]), int(row.get("#iterations", 0))
    if TOOLS[tool][1] is TestKind.BW:
        if "BW average" not in row:
            raise InputError(f"{path}: {tool}: the table has no 'BW average' column")
        unit = units.get("BW average", float("nan"))
        if unit != unit:
            raise InputError(f"{path}: {tool}: unknown bandwidth unit (Gb/sec, MiB/sec or "
                             f"MB/sec)")
        gbps = row["BW average"] * unit
        if gbps <= 0:
            raise InputError(f"{path}: {tool} {size} B: BW average is {row['BW average']}")
        if size < RATE_BELOW:
            # (the MsgRate column has more digits than a small message's BW average)
            rate = row.get("MsgRate") or gbps * 1e3 / (8 * size)
            return Figure(path, tool, flags, size, "msg_rate_mpps", rate, iters)
        return Figure(path, tool, flags, size, "bw_gbps", gbps, iters)
    metric = "t_typical" if "t_typical" in row else "t_avg"
    if metric not in row:
        raise InputError(f"{path}: {tool}: the table has neither t_typical nor t_avg")
    if row[metric] <= 0:
        raise InputError(f"{path}: {tool} {size} B: {metric} is {row[metric]}")
    return Figure(path, tool, flags, size, f"{metric}_us", row[metric], iters)


# -- JSON ------------------------------------------------------------------------------------

def _from_json(path: str, doc: Any) -> list[Figure]:
    info = doc.get("test_info") if isinstance(doc, dict) else None
    if not isinstance(info, dict) or not isinstance(info.get("test"), str):
        raise InputError(f"{path}: JSON without perftest's test_info.test (not a perftest "
                         f"--out_json file)")
    tool, flags = _tool(path, info["test"])
    # JSON keys are the text's names with '_' for ' ' (TX_depth, Max_inline_data, ...)
    text_keys = {"Connection_type": "Connection type", "Number_of_qps": "Number of qps",
                 "Mtu": "Mtu", "TX_depth": "TX depth", "RX_depth": "RX depth",
                 "CQ_Moderation": "CQ Moderation", "Outstand_reads": "Outstand reads",
                 "Max_inline_data": "Max inline data"}
    hdr = {text: str(info[k]) for k, text in text_keys.items() if k in info}
    flags += _header_flags(path, tool, hdr)
    rows = doc.get("all_results")
    if not isinstance(rows, list) or not rows:
        res = doc.get("results")
        rows = res if isinstance(res, list) else [res]
    figures = []
    for r in rows:
        if not isinstance(r, dict) or "MsgSize" not in r:
            raise InputError(f"{path}: results: an entry without MsgSize (not a perftest "
                             f"--out_json file)")
        try:
            row = {"#bytes": float(r["MsgSize"]),
                   "#iterations": float(r.get("n_iterations", 0))}
            for k, name in (("BW_average", "BW average"), ("MsgRate", "MsgRate"),
                            ("t_typical", "t_typical"), ("t_avg", "t_avg")):
                if k in r:
                    row[name] = float(r[k])
        except (TypeError, ValueError):
            raise InputError(f"{path}: results: {r!r}: not numbers") from None
        units = {}
        if "BW average" in row:
            units["BW average"] = _json_unit(path, row)
        figures.append(_figure(path, tool, flags, row, units))
    return figures


def _json_unit(path: str, row: dict[str, float]) -> float:
    """The JSON does not say whether BW_average is in Gb/s or MiB/s (--report_gbits decides);
    the message rate and size do: take the unit that makes BW = rate x size."""
    rate, size, bw = row.get("MsgRate"), row["#bytes"], row["BW average"]
    if not rate or bw <= 0:
        raise InputError(f"{path}: results: BW_average without a MsgRate to tell its unit "
                         f"(Gb/s or MiB/s)")
    gbps = rate * 1e6 * size * 8 / 1e9
    return min(_UNITS.values(), key=lambda u: abs(bw * u / gbps - 1))
