"""NIC profiles: a NIC, its PCIe link, its network link and the host CPU, as data.

A profile is a YAML file (the shipped ones are in this package, `NAME.yaml`; a user's own is
any path) with the sections a scenario has for the same things, `link`, `pcie`, `nic` and
`cpu`, validated by the same models (nicsim.profiles.sections), so a field means the same in
both. A value is given plain or with its source next to it:

    nic:
      tx_readahead: {value: 32, source: "ConnectX-5 read tags: ..."}

`base: NAME` starts from another profile and changes what it lists. A scenario's `profile:`
(or `nicsim run --profile`) puts the profile under the scenario: fields the scenario sets
itself win. Numbers live here, mechanisms in the model (profiles are data:
docs/explanation/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

PROFILE_DIR = Path(__file__).parent
SECTIONS = ("link", "pcie", "nic", "cpu")
_TOP = {"name", "title", "base", "perftest_device", "notes", *SECTIONS}


class ProfileError(ValueError):
    """A profile that cannot be used; the message is one line naming the file and field."""


class PerftestDevice(StrEnum):
    """The device class perftest would recognise the hardware as (its `ib_dev_name`, by PCI
    vendor and part ID). perftest picks its default inline size by it: a ConnectX gets 220
    bytes for WRITE and 236 for SEND latency tests, a device it does not know gets none."""

    CONNECTX4LX = "connectx4lx"
    CONNECTX5 = "connectx5"
    CONNECTX6DX = "connectx6dx"
    UNKNOWN = "unknown"

    @property
    def mellanox(self) -> bool:
        return self is not PerftestDevice.UNKNOWN


@dataclass
class Profile:
    name: str
    title: str
    path: Path
    perftest_device: PerftestDevice
    sections: dict[str, dict[str, Any]]  # the values this profile (and its bases) set
    sources: dict[str, str] = field(default_factory=dict)  # "nic.tx_readahead" -> source
    notes: str = ""

    def values(self) -> dict[str, dict[str, Any]]:
        """Every field of every section, the models' defaults filled in."""
        return {s: _model(s).model_validate(self.sections.get(s, {})).model_dump()
                for s in SECTIONS}


def _model(section: str) -> type[BaseModel]:
    from nicsim.profiles.sections import CpuSpec, NicSpec, PcieSpec, ProfileLinkSpec

    return {"link": ProfileLinkSpec, "pcie": PcieSpec, "nic": NicSpec, "cpu": CpuSpec}[section]


def profile_names() -> list[str]:
    """The profiles shipped with nicsim."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def _resolve(ref: str) -> Path:
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        p = Path(ref)
        if not p.is_file():
            raise ProfileError(f"profile {ref}: no such file")
        return p
    p = PROFILE_DIR / f"{ref}.yaml"
    if not p.is_file():
        raise ProfileError(f"unknown profile {ref!r} (profiles: {', '.join(profile_names())}; "
                           f"or a path to a .yaml file)")
    return p


def _strip(section: str, data: Any, where: str, sources: dict[str, str]) -> dict[str, Any]:
    """Values without their sources; the sources go into `sources` by dotted field name."""
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: {section}: a mapping of fields")
    out: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, dict):
            extra = set(v) - {"value", "source"}
            if "value" not in v or extra:
                raise ProfileError(f"{where}: {section}.{k}: a value, or {{value: V, source: "
                                   f"\"where V comes from\"}}")
            src = v.get("source")
            if src is not None:
                if not isinstance(src, str) or not src.strip():
                    raise ProfileError(f"{where}: {section}.{k}.source: a non-empty string")
                sources[f"{section}.{k}"] = src.strip()
            v = v["value"]
        out[str(k)] = v
    return out


def load_profile(ref: str, _seen: tuple[Path, ...] = ()) -> Profile:
    """The profile named `ref` (a shipped one) or at the path `ref`, validated."""
    path = _resolve(ref)
    if path.resolve() in _seen:
        chain = " -> ".join(p.stem for p in (*_seen, path.resolve()))
        raise ProfileError(f"{path}: base profiles form a loop ({chain})")
    where = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(f"{where}: cannot be read ({e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise ProfileError(f"{where}:{line} not valid YAML: "
                           f"{getattr(e, 'problem', None) or e}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: a profile is a mapping (name, title, link, pcie, nic, "
                           f"cpu)")
    unknown = sorted(set(map(str, data)) - _TOP)
    if unknown:
        raise ProfileError(f"{where}: {unknown[0]}: not a profile field (fields: "
                           f"{', '.join(sorted(_TOP))})")
    for key in ("name", "title"):
        if not isinstance(data.get(key), str) or not data[key].strip():
            raise ProfileError(f"{where}: {key}: a non-empty string is required")
    sources: dict[str, str] = {}
    sections: dict[str, dict[str, Any]] = {}
    device = PerftestDevice.UNKNOWN
    base = data.get("base")
    if base is not None:
        if not isinstance(base, str):
            raise ProfileError(f"{where}: base: a profile name or path")
        if ("/" in base or base.endswith((".yaml", ".yml"))) and not Path(base).is_absolute():
            base = str(path.parent / base)  # a user's profile extends a file beside it
        parent = load_profile(base, (*_seen, path.resolve()))
        sections = {s: dict(v) for s, v in parent.sections.items()}
        sources = dict(parent.sources)
        device = parent.perftest_device
    if "perftest_device" in data:
        try:
            device = PerftestDevice(data["perftest_device"])
        except ValueError:
            raise ProfileError(f"{where}: perftest_device: one of "
                               f"{', '.join(d.value for d in PerftestDevice)}, not "
                               f"{data['perftest_device']!r}") from None
    for s in SECTIONS:
        if s in data:
            mine = _strip(s, data[s], where, sources)
            sections[s] = {**sections.get(s, {}), **mine}
    for s, vals in sections.items():
        try:
            _model(s).model_validate(vals)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise ProfileError(f"{where}: {s}.{loc}: "
                               f"{err['msg'].removeprefix('Value error, ')}") from None
    notes = data.get("notes", "")
    return Profile(data["name"].strip(), data["title"].strip(), path, device, sections,
                   sources, notes if isinstance(notes, str) else "")
