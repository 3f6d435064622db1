"""Configuration knobs defined once: a dataclass field with its default, its bounds and what it
means, from which the scenario and profile schemas (nicsim.profiles.sections) are made, so a
knob is never written down twice."""

from __future__ import annotations

import dataclasses
from typing import Any


def knob(default: Any, doc: str = "", *, ge: float | None = None, gt: float | None = None,
         le: float | None = None) -> Any:
    """A configuration field: `default`, documented by `doc`, valid within the bounds given
    (the schema refuses anything else, naming the field)."""
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le)) if v is not None}
    return dataclasses.field(default=default, metadata={"knob": True, "doc": doc, **bounds})


def knobs(cls: type) -> list[dataclasses.Field]:
    """The knob fields of a configuration dataclass, in order."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("knob")]
