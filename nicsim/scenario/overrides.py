"""`--set key=value`: change any field of a scenario before it is validated.

The key is a dotted path with list indices (`link.rate_gbps`, `ops[1].bytes`,
`flows[0].load`); the value is read as YAML (`25`, `0.3`, `true`, `null`, `dcqcn`, `[a, b]`),
so it gets the type it would have in the file, and the scenario is then validated as a whole:
an override is held to the same strict types and one-line errors as the file.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from nicsim.scenario.schema import ScenarioError

_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)")


def parse_path(key: str) -> list[str | int]:
    """`ops[1].bytes` -> ['ops', 1, 'bytes']."""
    out: list[str | int] = []
    for part in key.split("."):
        m = _PART.fullmatch(part)
        if m is None:
            raise ScenarioError(f"--set {key}: not a field path (like link.rate_gbps or "
                                f"ops[0].bytes)")
        out.append(m.group(1))
        out += [int(i) for i in re.findall(r"\[(\d+)\]", m.group(2))]
    return out


def parse_assignment(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ScenarioError(f"--set {text}: expected key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        raise ScenarioError(f"--set {text}: the value is not valid YAML") from None
    return key, value


def set_path(data: dict[str, Any], key: str, value: Any) -> None:
    """Put `value` at `key` in the raw scenario mapping; missing mappings on the way are
    created (so `link.faults.loss` works on a file without `link`), list entries are not."""
    path = parse_path(key)
    node: Any = data
    for i, part in enumerate(path[:-1]):
        nxt = path[i + 1]
        where = _show(path[:i + 1])
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                n = len(node) if isinstance(node, list) else 0
                raise ScenarioError(f"--set {key}: {_show(path[:i])} has {n} entries")
            if node[part] is None or not isinstance(node[part], (dict, list)):
                node[part] = {} if isinstance(nxt, str) else []
            node = node[part]
            continue
        if not isinstance(node, dict):
            raise ScenarioError(f"--set {key}: {_show(path[:i])} is not a mapping")
        if node.get(part) is None:
            if isinstance(nxt, int):
                raise ScenarioError(f"--set {key}: {where} has 0 entries")
            node[part] = {}
        node = node[part]
    last = path[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            n = len(node) if isinstance(node, list) else 0
            raise ScenarioError(f"--set {key}: {_show(path[:-1])} has {n} entries")
        node[last] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ScenarioError(f"--set {key}: {_show(path[:-1])} is not a mapping")


def _show(path: list[str | int]) -> str:
    s = ""
    for p in path:
        s += f"[{p}]" if isinstance(p, int) else (f".{p}" if s else p)
    return s or "the scenario"


def apply(data: dict[str, Any], assignments: list[str]) -> dict[str, Any]:
    for a in assignments:
        key, value = parse_assignment(a)
        set_path(data, key, value)
    return data
