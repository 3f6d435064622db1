"""The documentation's reference pages, made from the code (an mkdocs hook: every build makes
them again, so they cannot fall behind it).

    docs/reference/cli.md        every command's --help, as argparse (and perftest) print it
    docs/reference/scenario.md   every scenario field: type, default, meaning (the pydantic
                                 models and the configuration knobs)
    docs/reference/counters.md   every counter a NIC and a switch report, by block
    docs/reference/profiles.md   every shipped NIC and host profile, each value with its source
    docs/reference/hwif.md       the hardware/software contract: registers, commands, layouts

Run by mkdocs (mkdocs.yml `hooks:`), or by hand: python scripts/docs_reference.py
"""

from __future__ import annotations

import enum
import inspect
import io
import os
import re
import types
import typing
from collections.abc import Callable
from contextlib import redirect_stdout, suppress
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "reference"
NOTE = ("<!-- Made by scripts/docs_reference.py from the code at every docs build: edit the "
        "code, not this page. -->\n\n")


def _help(fn: Callable[[], object]) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf), suppress(SystemExit):
        fn()
    return buf.getvalue()


def cli() -> str:
    import argparse

    from nicsim.apps.perftest import TOOLS, USAGE
    from nicsim.cli import parser
    from nicsim.exec.launch import _parser as exec_parser

    ap = parser()
    out = ["# Command line\n", NOTE, "`nicsim --help`:\n", "```text", ap.format_help().rstrip(),
           "```\n"]
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    for name, p in sub.choices.items():
        if name == "perftest":
            text = USAGE.format(tools=", ".join(TOOLS))
        elif name == "exec":
            text = exec_parser().format_help()
        else:
            text = p.format_help()
            for a in p._actions:  # (nested commands: nicsim pcap check)
                if isinstance(a, argparse._SubParsersAction):
                    text += "".join("\n" + q.format_help() for q in a.choices.values())
        out += [f"## nicsim {name}\n", "```text", text.rstrip(), "```\n"]
    return "\n".join(out)


def _type(t: object) -> str:
    from pydantic import BaseModel

    if t is None or t is type(None):
        return "null"
    origin = typing.get_origin(t)
    if origin is typing.Annotated:
        return _type(typing.get_args(t)[0]) + _bounds(typing.get_args(t)[1:])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in typing.get_args(t))
    if origin is typing.Literal:
        return " or ".join(repr(a) for a in typing.get_args(t))
    if origin is not None:
        args = ", ".join(_type(a) for a in typing.get_args(t))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if isinstance(t, type):
        if issubclass(t, enum.Enum):
            return " or ".join(repr(m.value) for m in t)
        if issubclass(t, BaseModel):
            return "mapping"  # (its section says what)
        return t.__name__
    return str(t)


def _num(x: float) -> str:
    if isinstance(x, float):
        return f"{x:g}"
    if x >= 1 << 20 and not x & (x - 1):
        return f"2^{x.bit_length() - 1}"
    if x >= 1 << 20 and not x & (x + 1):
        return f"2^{x.bit_length()}-1"
    return f"{x:,}" if x >= 100_000 else str(x)


def _bounds(meta: typing.Iterable[object]) -> str:
    """A field's bounds, as " (0..7)", " (> 0)", " (length 8)", or ""."""
    import annotated_types as at
    from pydantic.fields import FieldInfo

    b: dict[str, typing.Any] = {}
    for m in meta:
        for c in (m.metadata if isinstance(m, FieldInfo) else [m]):
            if isinstance(c, at.Ge | at.Gt | at.Le | at.Lt | at.MinLen | at.MaxLen):
                b.update((k, getattr(c, k)) for k in ("ge", "gt", "le", "lt", "min_length",
                                                      "max_length") if hasattr(c, k))
    out = []
    if "ge" in b and "le" in b:
        out.append(f"{_num(b['ge'])}..{_num(b['le'])}")
    else:
        out += [f"{op} {_num(b[k])}" for k, op in (("ge", ">="), ("gt", ">"), ("le", "<="),
                                                    ("lt", "<")) if k in b]
    lo, hi = b.get("min_length"), b.get("max_length")
    if lo is not None and lo == hi:
        out.append(f"length {lo}")
    elif lo is not None and hi is not None:
        out.append(f"length {lo}..{hi}")
    elif lo is not None or hi is not None:
        out.append(f"length >= {lo}" if lo is not None else f"length <= {hi}")
    return f" ({', '.join(out)})" if out else ""


def _value(v: object) -> str:
    """A default as a scenario file would write it (null as "none")."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, enum.Enum):
        return _value(v.value)
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_value(x)}" for k, x in v.items()) + "}"
    return repr(v)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _plain(text: str) -> str:
    """Plain text (a field's description) as Markdown: `*` and `_` outside code spans are
    characters, not emphasis (edge{p}_{i}, *_cycles)."""
    parts = text.split("`")
    return "`".join(re.sub(r"\\|\*|(?<!\w)_|_(?!\w)", r"\\\g<0>", x) if i % 2 == 0 else x
                    for i, x in enumerate(parts))


def scenario() -> str:
    from markdown.extensions.toc import slugify  # (the anchors mkdocs gives the headings)
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    from nicsim.scenario.schema import Scenario

    seen: dict[type[BaseModel], str] = {}  # model -> the first field path it is at

    def models(annotation: object) -> list[type[BaseModel]]:
        return [t for t in _types_in(annotation)
                if isinstance(t, type) and issubclass(t, BaseModel)]

    def walk(m: type[BaseModel], path: str) -> None:
        if m in seen:
            return
        seen[m] = path
        for name, f in m.model_fields.items():
            lists = any(typing.get_origin(t) is list for t in _types_in(f.annotation))
            for t in models(f.annotation):
                walk(t, f"{path}.{name}{'[i]' if lists else ''}".lstrip("."))

    def link(m: type[BaseModel]) -> str:  # to the model's section: its heading's anchor
        return f"[`{seen[m]}`](#{slugify(seen[m], '-')})"

    def default(f: typing.Any) -> str:
        if f.default_factory is not None:
            return "(made)"
        if f.default is PydanticUndefined:
            return "required"
        nested = models(f.annotation)
        if isinstance(f.default, BaseModel):
            return f"see {link(type(f.default))}"
        return f"{_value(f.default)}, see {link(nested[0])}" if nested else _value(f.default)

    walk(Scenario, "")
    out = ["# Scenario schema\n", NOTE,
           "Every field a scenario file may set (the [scenario guide](../how-to/scenarios.md) "
           "explains them with examples). A field left out takes its default; an unknown one "
           "is an error that names it. A default of none is YAML's `null`.\n"]
    for m, path in seen.items():
        doc = inspect.cleandoc(m.__dict__.get("__doc__") or "")  # (its own, not BaseModel's)
        out += [f"## `{path}`\n" if path else "## The scenario\n", doc + "\n" if doc else "",
                "| field | type | default | meaning |", "|---|---|---|---|"]
        for name, f in m.model_fields.items():
            kind = _type(f.annotation) + _bounds(f.metadata)
            out.append(f"| `{name}` | {_cell(kind)} | {_cell(default(f))} | "
                       f"{_cell(_plain(f.description or ''))} |")
        out.append("")
    return "\n".join(out)


def _types_in(t: object) -> list[object]:
    args = typing.get_args(t)
    return [t, *[x for a in args for x in _types_in(a)]]


def counters() -> str:
    import importlib

    from nicsim.fabric.topology import Shape, TopologySpec
    from nicsim.world import World

    nic = World.two_hosts().nics["a"].counters()
    sw = next(iter(World.from_topology(TopologySpec(Shape.STAR, hosts=2))
                   .switches.values())).counters()
    groups: dict[str, list[str]] = {}
    for k in nic:
        groups.setdefault(k.split(".", 1)[0], []).append(k)
    modules = {"rx": "nic", "port": "port", "pcie": "dma", "sched": "scheduler",
               "wqe_fetch": "wqe_fetch", "requester": "requester", "responder": "responder",
               "completer": "completer", "odp": "odp", "cq": "cq", "cmd": "command",
               "np": "cc.notify", "xlate": "translation"}
    out = ["# Counters\n", NOTE,
           "`Nic.counters()` (in `nicsim run --json` under `counters`, per host) and "
           "`Switch.counters()` (under `switches`). A NIC's counters, by the block that keeps "
           "them:\n"]
    for g, keys in groups.items():
        mod = modules.get(g)
        doc = ""
        if mod is not None:
            try:
                m = importlib.import_module(f"nicsim.nic.{mod}")
                doc = (inspect.getdoc(m) or "").split("\n\n")[0].replace("\n", " ")
            except ImportError:
                doc = ""
        out += [f"## {g}\n", doc + "\n" if doc else "",
                ", ".join(f"`{k}`" for k in keys) + "\n"]
    import nicsim.fabric.switch as switch

    doc = inspect.getdoc(switch) or ""
    i = doc.find("Counters (")
    j = doc.find("\n\n", doc.find("buffer.shared_bytes", i))
    out += ["## Switch\n", "```text", doc[i:j].strip(), "```\n",
            f"A two-port switch reports {len(sw)} counters.\n"]
    return "\n".join(out)


def profiles() -> str:
    from nicsim.profiles import (
        SECTIONS,
        host_profile_names,
        load_host_profile,
        load_profile,
        profile_names,
    )

    out = ["# Profiles\n", NOTE, "Each shipped profile, every value with where it comes from "
           "(`nicsim profiles NAME` prints the same; \"model default\" is the model's own).\n"]
    for name in profile_names():
        p = load_profile(name)
        values = p.values()
        out += [f"## {name}\n", f"{p.title}. perftest device class: "
                                f"{p.perftest_device.value}.\n",
                "| field | value | source |", "|---|---|---|"]
        for s in SECTIONS:
            for k, v in values[s].items():
                src = p.sources.get(f"{s}.{k}") or \
                    ("" if k in p.sections.get(s, {}) else "model default")
                out.append(f"| `{s}.{k}` | {_cell(v)} | {_cell(src)} |")
        out.append("")
    out += ["# Host profiles\n", "The machine around the NIC (`--host-profile NAME`, a "
            "scenario's `host: {profile: NAME}`; `nicsim profiles --hosts NAME` prints the "
            "same). A host profile sets only what is known of that host; its fields replace "
            "the NIC profile's, every other field stays the NIC profile's, and the PCIe link "
            "trains to the narrower of card and slot.\n"]
    for name in host_profile_names():
        p = load_host_profile(name)
        out += [f"## {name}\n", f"{p.title}.\n", "| field | value | source |", "|---|---|---|"]
        out += [f"| `{s}.{k}` | {_cell(v)} | {_cell(p.sources.get(f'{s}.{k}', ''))} |"
                for s, vals in p.sections.items() for k, v in vals.items()]
        out.append("")
    return "\n".join(out)


def hwif() -> str:
    from dataclasses import is_dataclass

    from nicsim import hwif as h

    out = ["# The hardware/software interface (`nicsim/hwif.py`)\n", NOTE,
           (inspect.getdoc(h) or "") + "\n"]
    enums = [(n, o) for n, o in vars(h).items()
             if isinstance(o, type) and issubclass(o, enum.Enum) and o.__module__ == h.__name__]
    records = [(n, o) for n, o in vars(h).items()
               if isinstance(o, type) and is_dataclass(o) and o.__module__ == h.__name__]
    out.append("## Enumerations\n")
    for n, e in enums:
        doc = inspect.getdoc(e) or ""
        out += [f"### {n}\n", doc + "\n" if doc and doc != inspect.getdoc(type(e)) else "",
                "| name | value |", "|---|---|"]
        out += [f"| `{m.name}` | {m.value:#x} |" if isinstance(m.value, int)
                else f"| `{m.name}` | {m.value} |" for m in e]
        out.append("")
    out.append("## Records (layouts)\n")
    for n, r in records:
        doc = inspect.getdoc(r) or ""
        out += [f"### {n}\n", "```text", doc, "```\n"]
    return "\n".join(out)


PAGES = {"cli.md": cli, "scenario.md": scenario, "counters.md": counters,
         "profiles.md": profiles, "hwif.md": hwif}


def generate() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("COLUMNS", "100")  # (argparse wraps its help to the terminal)
    for name, fn in PAGES.items():
        (OUT / name).write_text(fn())


def on_pre_build(config: object, **_: object) -> None:  # mkdocs hook
    generate()


if __name__ == "__main__":
    generate()
