"""A scenario as a command loads it: a file (or the built-in default) with the command line's
overrides applied, validated."""

from __future__ import annotations

import copy
from typing import Any

from nicsim.scenario import overrides as ov
from nicsim.scenario.schema import DEFAULT, ScenarioError, load_data, read_text, validate


def load(path: str | None, overrides: list[tuple[str, str]]) -> tuple[Any, str]:
    """The scenario at `path` (the built-in default without one) with the overrides applied
    and validated; a bad override is named as it was typed."""
    source = str(path or DEFAULT)
    data = load_data(read_text(source), source)
    changed = ov.apply(copy.deepcopy(data), [a for _, a in overrides])
    try:
        return validate(changed, source), source
    except ScenarioError as e:
        if not overrides:
            raise
        try:
            validate(data, source)
        except ScenarioError:
            raise e from None
        # The file is fine: an override is at fault.
        msg = str(e).removeprefix(f"{source}: ")
        raise ScenarioError(f"{', '.join(f for f, _ in overrides)}: {msg}") from None
