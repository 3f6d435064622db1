"""The registry of reaction-point algorithms, the scenario's `cc:` value made into a CcConfig,
and a user's algorithm loaded from a Python file.

A scenario names an algorithm and its parameters (`cc: {algorithm: hpcc, eta: 0.9}`), a
preset (`cc: dcqcn_mlx`, or `cc: {preset: dcqcn_mlx, rai_mbps: 100}`), or a file of its own
(`cc: {module: ./my_cc.py, step_mbps: 500}`, relative to the scenario's directory). Every
mistake is one CcConfigError line naming the field; a user's file that does not load says
why in one line too, never with a traceback.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import importlib.util
import traceback
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from nicsim.nic.cc.config import (
    PRESETS as _DCQCN_PRESETS,
)
from nicsim.nic.cc.config import (
    AlphaUpdate,
    CcAlgorithm,
    CcConfig,
    CcConfigError,
    CnpConfig,
    DcqcnParams,
)
from nicsim.nic.cc.control import RateControl
from nicsim.nic.cc.dcqcn import Dcqcn
from nicsim.nic.cc.dctcp import Dctcp
from nicsim.nic.cc.hpcc import Hpcc
from nicsim.nic.cc.timely import Timely
from nicsim.nic.qp import QpCtx
from nicsim.sim import Sim

ALGORITHMS: dict[CcAlgorithm, type[RateControl]] = {
    CcAlgorithm.DCQCN: Dcqcn,
    CcAlgorithm.HPCC: Hpcc,
    CcAlgorithm.TIMELY: Timely,
    CcAlgorithm.DCTCP: Dctcp,
}


def _preset(cls: type[RateControl], cnp: CnpConfig | None = None) -> CcConfig:
    assert cls.Params is not None
    return CcConfig(CcAlgorithm(cls.name), cls.name, cnp=cnp or CnpConfig(),
                    params=cls.Params())


# The DCQCN presets (nicsim.nic.cc.config), and one per other algorithm with its defaults.
# HPCC and TIMELY read no ECN: their NICs send no CNPs. DCTCP learns the marked fraction from
# CNPs: its notification point sends one per marked packet (no CNP interval).
PRESETS: dict[str, CcConfig] = {
    **_DCQCN_PRESETS,
    "hpcc": _preset(Hpcc, CnpConfig(enabled=False)),
    "timely": _preset(Timely, CnpConfig(enabled=False)),
    "dctcp": _preset(Dctcp, CnpConfig(interval_us=0.0)),
}
_BY_ALGORITHM = {CcAlgorithm.DCQCN: "dcqcn_mlx", CcAlgorithm.HPCC: "hpcc",
                 CcAlgorithm.TIMELY: "timely", CcAlgorithm.DCTCP: "dctcp",
                 CcAlgorithm.NONE: "none"}


def make_rate_control(env: Sim, cfg: CcConfig, line_gbps: Callable[[], float],
                      rate_changed: Callable[[QpCtx], None]) -> RateControl | None:
    """The reaction point `cfg` asks for (None: no congestion control)."""
    if cfg.algorithm is CcAlgorithm.NONE:
        return None
    cls = cfg.impl if cfg.algorithm is CcAlgorithm.CUSTOM else ALGORITHMS[cfg.algorithm]
    return cls(env, cfg, line_gbps, rate_changed)


# -- the scenario's `cc:` ------------------------------------------------------------------

_DCQCN_FIELDS = {f.name for f in fields(DcqcnParams)}
_CNP_FIELDS = {f.name for f in fields(CnpConfig)}
_COMMON = ("preset", "algorithm", "module", "trace", "pacing_jitter", "cnp")


def cc_from_dict(spec: str | Mapping[str, Any] | None, base: Path | None = None) -> CcConfig:
    """A CcConfig from a scenario's `cc:` value: a preset or algorithm name, or a mapping with
    `preset`, `algorithm` or `module` and any parameters to override (the algorithm's at the
    top level, the notification point's under `cnp`, `trace`, `pacing_jitter`). A relative
    `module` path is taken from `base` (the scenario's directory; else the working one)."""
    if spec is None:
        return PRESETS["none"]
    if isinstance(spec, str):
        spec = {"preset": spec} if spec in PRESETS or spec not in _algorithm_names() else \
            {"algorithm": spec}
    if not isinstance(spec, Mapping):
        raise CcConfigError("cc: a preset name or a mapping")
    spec = dict(spec)
    module = spec.pop("module", None)
    algorithm = spec.pop("algorithm", None)
    name = spec.pop("preset", None)
    if module is not None:
        if algorithm is not None or name is not None:
            raise CcConfigError("cc.module: a user's algorithm takes no preset or algorithm")
        if not isinstance(module, str) or not module:
            raise CcConfigError("cc.module: the path of a Python file")
        cls = load_module(module, base)
        base_cfg = CcConfig(CcAlgorithm.CUSTOM, cls.name, impl=cls, module=module,
                            params=None if cls.Params is None else cls.Params())
    else:
        if algorithm is not None:
            try:
                alg = CcAlgorithm(algorithm)
            except ValueError:
                alg = None
            if alg is None or alg is CcAlgorithm.CUSTOM:
                raise CcConfigError(f"cc.algorithm: unknown algorithm {algorithm!r} (known: "
                                    f"{', '.join(_algorithm_names())}; or cc.module: a "
                                    f"Python file of your own)")
            if name is None:
                name = _BY_ALGORITHM[alg]
            elif name not in PRESETS or PRESETS[name].algorithm is not alg:
                raise CcConfigError(f"cc.preset: {name!r} is not a preset of {alg.value}")
        elif name is None:
            name = "dcqcn_mlx"
        if name not in PRESETS:
            raise CcConfigError(f"cc.preset: unknown preset {name!r} (known: "
                                f"{', '.join(PRESETS)})")
        base_cfg = PRESETS[name]
    trace = spec.pop("trace", base_cfg.trace)
    if not isinstance(trace, bool):
        raise CcConfigError("cc.trace: must be true or false")
    jitter = spec.pop("pacing_jitter", base_cfg.pacing_jitter)
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or \
            not 0 <= jitter < 1:
        raise CcConfigError("cc.pacing_jitter: must be a number in [0, 1)")
    cnp = spec.pop("cnp", {}) or {}
    if not isinstance(cnp, Mapping):
        raise CcConfigError("cc.cnp: must be a mapping")
    for k in cnp:
        if k not in _CNP_FIELDS:
            raise CcConfigError(f"cc.cnp.{k}: unknown parameter (known: "
                                f"{', '.join(sorted(_CNP_FIELDS))})")
    _numbers("cnp.", cnp, {"enabled"})
    np_cfg = replace(base_cfg.cnp, **cnp)
    np_cfg.check()
    alg = base_cfg.algorithm
    if alg is CcAlgorithm.DCQCN:
        params = _dcqcn(spec)
        params = replace(base_cfg.dcqcn, **params)
        params.check()
        return CcConfig(alg, base_cfg.preset, params, np_cfg, trace, float(jitter))
    if spec and (alg is CcAlgorithm.NONE or base_cfg.params is None):
        raise CcConfigError(f"cc.{next(iter(spec))}: preset {base_cfg.preset!r} has no "
                            f"parameters")
    p = base_cfg.params
    if p is not None:
        p = _params(p, spec)
    return replace(base_cfg, cnp=np_cfg, trace=trace, pacing_jitter=float(jitter), params=p)


def _algorithm_names() -> list[str]:
    return [a.value for a in CcAlgorithm if a is not CcAlgorithm.CUSTOM]


def _dcqcn(spec: dict[str, Any]) -> dict[str, Any]:
    for k in spec:
        if k not in _DCQCN_FIELDS:
            raise CcConfigError(f"cc.{k}: unknown parameter (known: {', '.join(_COMMON)}, "
                                f"{', '.join(sorted(_DCQCN_FIELDS))})")
    if "alpha_update" in spec:
        try:
            spec["alpha_update"] = AlphaUpdate(spec["alpha_update"])
        except ValueError as e:
            raise CcConfigError(f"cc.alpha_update: {e}") from None
    _numbers("", {k: v for k, v in spec.items() if k != "alpha_update"}, {"clamp_target"})
    return spec


def _numbers(prefix: str, given: Mapping[str, Any], flags: set[str]) -> None:
    for k, v in given.items():
        if k in flags and not isinstance(v, bool):
            raise CcConfigError(f"cc.{prefix}{k}: must be true or false, not {v!r}")
        if k not in flags and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise CcConfigError(f"cc.{prefix}{k}: must be a number, not {v!r}")


def _params(p: Any, spec: dict[str, Any]) -> Any:
    """The dataclass `p` with `spec`'s values, each checked against its field's default."""
    known = {f.name: getattr(p, f.name) for f in fields(p)}
    out: dict[str, Any] = {}
    for k, v in spec.items():
        if k not in known:
            raise CcConfigError(f"cc.{k}: unknown parameter (known: {', '.join(_COMMON)}"
                                f"{', ' if known else ''}{', '.join(sorted(known))})")
        d = known[k]
        if isinstance(d, bool):
            if not isinstance(v, bool):
                raise CcConfigError(f"cc.{k}: must be true or false, not {v!r}")
        elif isinstance(d, enum.Enum):
            try:
                v = type(d)(v)
            except ValueError:
                raise CcConfigError(f"cc.{k}: one of {', '.join(str(e.value) for e in type(d))}"
                                    f", not {v!r}") from None
        elif isinstance(d, int):
            if isinstance(v, bool) or not isinstance(v, int):
                raise CcConfigError(f"cc.{k}: must be an integer, not {v!r}")
        elif isinstance(d, float):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise CcConfigError(f"cc.{k}: must be a number, not {v!r}")
            v = float(v)
        elif isinstance(d, str) and not isinstance(v, str):
            raise CcConfigError(f"cc.{k}: must be a string, not {v!r}")
        out[k] = v
    try:
        p = replace(p, **out)
        check = getattr(p, "check", None)
        if check is not None:
            check()
    except CcConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise CcConfigError(f"cc: {e}") from None
    return p


# -- a user's algorithm ----------------------------------------------------------------------

_LOADED: dict[tuple[str, int], type[RateControl]] = {}


def load_module(path: str, base: Path | None = None) -> type[RateControl]:
    """The RateControl subclass a Python file defines (its `ALGORITHM`, if it names one).
    Loaded once per file version; every failure is one CcConfigError line."""
    p = Path(path).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    try:
        p = p.resolve()
        stat = p.stat()
    except OSError as e:
        raise CcConfigError(f"cc.module: {path}: {e.strerror or e}") from None
    if not p.is_file():
        raise CcConfigError(f"cc.module: {path}: not a file")
    key = (str(p), stat.st_mtime_ns)
    cls = _LOADED.get(key)
    if cls is not None:
        return cls
    digest = hashlib.sha1(str(p).encode()).hexdigest()[:12]
    mod_name = f"nicsim_user_cc_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, p)
    if spec is None or spec.loader is None:
        raise CcConfigError(f"cc.module: {path}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except SyntaxError as e:
        raise CcConfigError(f"cc.module: {path}:{e.lineno}: {e.msg}") from None
    except BaseException as e:  # noqa: BLE001 - a user's file may raise anything
        if isinstance(e, KeyboardInterrupt):
            raise
        line = next((f.lineno for f in reversed(traceback.extract_tb(e.__traceback__))
                     if f.filename == str(p)), None)
        where = f":{line}" if line else ""
        raise CcConfigError(f"cc.module: {path}{where}: {type(e).__name__}: {e}") from None
    chosen = getattr(mod, "ALGORITHM", None)
    if chosen is None:
        found = [v for v in vars(mod).values() if isinstance(v, type)
                 and issubclass(v, RateControl) and v.__module__ == mod_name]
        if not found:
            raise CcConfigError(f"cc.module: {path}: defines no subclass of "
                                f"nicsim.nic.cc.RateControl")
        if len(found) > 1:
            raise CcConfigError(f"cc.module: {path}: defines {len(found)} RateControl "
                                f"classes ({', '.join(c.__name__ for c in found)}): set "
                                f"ALGORITHM to the one to use")
        chosen = found[0]
    if not (isinstance(chosen, type) and issubclass(chosen, RateControl)):
        raise CcConfigError(f"cc.module: {path}: ALGORITHM is not a RateControl subclass")
    if chosen.Params is not None and not dataclasses.is_dataclass(chosen.Params):
        raise CcConfigError(f"cc.module: {path}: {chosen.__name__}.Params must be a "
                            f"dataclass")
    if chosen.Params is not None:
        try:
            chosen.Params()
        except TypeError as e:
            raise CcConfigError(f"cc.module: {path}: {chosen.__name__}.Params needs a "
                                f"default for every field ({e})") from None
    if not chosen.name:
        chosen.name = p.stem
    _LOADED[key] = chosen
    return chosen
