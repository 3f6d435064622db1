"""Sweep files: a base scenario, parameter lists and seeds; the points they make.

    scenario: websearch.yaml      # the base scenario (relative to this file)
    name: load-sweep              # default: this file's name
    mode: cross                   # cross (every combination) or zip (lists side by side)
    parameters:                   # scenario fields, as `--set` names them
      flows[0].load: [0.3, 0.5, 0.7]
      link.rate_gbps: [25, 100]
    seeds: [1, 2]                 # or a count N (seeds 1..N); default: the scenario's
    set: {stop.time_limit_us: 5000}   # fixed for every point
    pcap: false                   # pcaps of the points (large: off by default)
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nicsim.scenario.overrides import parse_path
from nicsim.scenario.schema import NAME, ScenarioError, load_data, one_line, read_text

Scalar = str | int | float | bool | None


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    scenario: Annotated[str, Field(min_length=1)]
    name: str | None = None
    mode: Literal["cross", "zip"] = "cross"
    parameters: Annotated[dict[str, Annotated[list[Any], Field(min_length=1)]],
                          Field(min_length=1)]
    seeds: list[Annotated[int, Field(ge=0, le=(1 << 63) - 1)]] | \
        Annotated[int, Field(ge=1, le=100_000)] | None = None
    set: dict[str, Any] = {}
    pcap: bool = False


@dataclass(frozen=True)
class Point:
    index: int
    params: tuple[tuple[str, Any], ...]  # (key, value) of each swept parameter
    seed: int | None

    @property
    def dirname(self) -> str:
        parts = [f"{_short(k)}={_slug(v)}" for k, v in self.params]
        if self.seed is not None:
            parts.append(f"seed={self.seed}")
        return f"{self.index:03d}-" + "-".join(parts)[:150]

    def overrides(self, fixed: dict[str, Any]) -> list[str]:
        out = [f"{k}={_yaml(v)}" for k, v in fixed.items()]
        out += [f"{k}={_yaml(v)}" for k, v in self.params]
        if self.seed is not None:
            out.append(f"seed={self.seed}")
        return out


def _short(key: str) -> str:
    """The last name of a dotted key: `flows[0].load` -> `load`."""
    return re.sub(r"\[\d+\]", "", key.rsplit(".", 1)[-1])


def _slug(v: Any) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(v))


def _yaml(v: Any) -> str:
    import yaml

    return yaml.safe_dump(v, default_flow_style=True, width=1 << 20).strip().removesuffix(
        "\n...").strip()


@dataclass
class Sweep:
    spec: SweepSpec
    path: Path
    name: str
    base: Path  # the base scenario file
    points: list[Point]

    @property
    def keys(self) -> list[str]:
        return list(self.spec.parameters)


def load_sweep(path: str | Path) -> Sweep:
    p = Path(path)
    data = load_data(read_text(p), str(p))
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(f"{p}: {one_line(e)}") from None
    for key in [*spec.parameters, *spec.set]:
        try:
            parse_path(key)
        except ScenarioError:
            raise ScenarioError(f"{p}: parameters: {key!r} is not a field path (like "
                                f"link.rate_gbps or flows[0].load)") from None
    name = spec.name or p.stem
    if not NAME.fullmatch(name):
        raise ScenarioError(f"{p}: name: letters, digits, '.', '_' and '-' (it names a "
                            f"directory)")
    lists = list(spec.parameters.values())
    if spec.mode == "zip":
        n = {len(v) for v in lists}
        if len(n) != 1:
            raise ScenarioError(f"{p}: mode zip needs parameter lists of one length, not "
                                f"{sorted(n)}")
        combos = list(zip(*lists, strict=True))
    else:
        combos = list(itertools.product(*lists))
    seeds: list[int | None]
    if spec.seeds is None:
        seeds = [None]
    elif isinstance(spec.seeds, int):
        seeds = list(range(1, spec.seeds + 1))
    else:
        seeds = list(spec.seeds)
    keys = list(spec.parameters)
    points = [Point(i, tuple(zip(keys, c, strict=True)), s)
              for i, (c, s) in enumerate(itertools.product(combos, seeds))]
    base = Path(spec.scenario)
    if not base.is_absolute():
        base = p.resolve().parent / base
    return Sweep(spec, p, name, base, points)


def row_params(pt: Point) -> dict[str, Any]:
    d: dict[str, Any] = {k: v for k, v in pt.params}
    d["seed"] = pt.seed
    return d


__all__ = ["Point", "Scalar", "Sweep", "SweepSpec", "load_sweep", "row_params"]
