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

A host profile (`hosts/NAME.yaml`, or a path) is the machine around the NIC: the `pcie` and
`cpu` sections only (the root complex's latency and memory time, the slot's width and
generation, MPS/MRRS, the CPU's verbs costs). A NIC profile's own `pcie` and `cpu` values are
those of the host it was fitted on; a host profile (`--host-profile`, a scenario's
`host: {profile: ...}`) replaces them (`with_host`): the NIC is the same card in another
machine. The link trains to the narrower of the card's and the slot's width and generation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

PROFILE_DIR = Path(__file__).parent
HOST_DIR = PROFILE_DIR / "hosts"
SECTIONS = ("link", "pcie", "nic", "cpu")
HOST_SECTIONS = ("pcie", "cpu")


@dataclass(frozen=True)
class _Kind:
    what: str  # as messages name it
    directory: Path
    sections: tuple[str, ...]
    extra: tuple[str, ...] = ()  # top-level fields of its own

    @property
    def top(self) -> set[str]:
        return {"name", "title", "base", "notes", *self.extra, *self.sections}

    def names(self) -> list[str]:
        return sorted(p.stem for p in self.directory.glob("*.yaml"))


_NIC = _Kind("profile", PROFILE_DIR, SECTIONS, ("perftest_device",))
_HOST = _Kind("host profile", HOST_DIR, HOST_SECTIONS)


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
    kinds: tuple[str, ...] = SECTIONS  # the sections a profile of its kind has

    def values(self) -> dict[str, dict[str, Any]]:
        """Every field of every section, the models' defaults filled in."""
        return {s: _model(s).model_validate(self.sections.get(s, {})).model_dump()
                for s in self.kinds}


def _model(section: str) -> type[BaseModel]:
    from nicsim.profiles.sections import CpuSpec, NicSpec, PcieSpec, ProfileLinkSpec

    return {"link": ProfileLinkSpec, "pcie": PcieSpec, "nic": NicSpec, "cpu": CpuSpec}[section]


def profile_names() -> list[str]:
    """The NIC profiles shipped with nicsim."""
    return _NIC.names()


def host_profile_names() -> list[str]:
    """The host profiles shipped with nicsim."""
    return _HOST.names()


def _resolve(ref: str, kind: _Kind) -> Path:
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        p = Path(ref)
        if not p.is_file():
            raise ProfileError(f"{kind.what} {ref}: no such file")
        return p
    p = kind.directory / f"{ref}.yaml"
    if not p.is_file():
        raise ProfileError(f"unknown {kind.what} {ref!r} ({kind.what}s: "
                           f"{', '.join(kind.names())}; "
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


def load_profile(ref: str) -> Profile:
    """The NIC profile named `ref` (a shipped one) or at the path `ref`, validated."""
    return _load(ref, _NIC)


def load_host_profile(ref: str) -> Profile:
    """The host profile named `ref` (a shipped one, hosts/REF.yaml) or at the path `ref`."""
    return _load(ref, _HOST)


def with_host(sections: dict[str, dict[str, Any]], host: Profile) -> dict[str, dict[str, Any]]:
    """A NIC profile's sections with the host profile's `pcie` and `cpu` over them: the same
    card in another machine. The link trains to the lower of the card's and the slot's
    generation and width (the highest rate and widest width both ends support: PCIe Base
    Specification, 4.2, link initialization and training)."""
    out = {s: dict(v) for s, v in sections.items()}
    card = _model("pcie").model_validate(out.get("pcie", {}))
    for s, vals in host.sections.items():
        mine = out.setdefault(s, {})
        for k, v in vals.items():
            mine[k] = min(v, getattr(card, k)) if s == "pcie" and k in ("gen", "lanes") else v
    return out


def _load(ref: str, kind: _Kind, _seen: tuple[Path, ...] = ()) -> Profile:
    path = _resolve(ref, kind)
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
        raise ProfileError(f"{where}: a {kind.what} is a mapping (name, title, "
                           f"{', '.join(kind.sections)})")
    unknown = sorted(set(map(str, data)) - kind.top)
    if unknown:
        raise ProfileError(f"{where}: {unknown[0]}: not a {kind.what} field (fields: "
                           f"{', '.join(sorted(kind.top))})")
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
        parent = _load(base, kind, (*_seen, path.resolve()))
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
    for s in kind.sections:
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
                   sources, notes if isinstance(notes, str) else "", kind.sections)
