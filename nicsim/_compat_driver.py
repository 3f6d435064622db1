"""The old import name `driver` for `nicsim.driver`, while code still uses it.

nicsim installs its driver as `nicsim.driver` (the `driver/` folder, see setup.py) and no
longer installs a top-level `driver` package, so it cannot collide with another project's.
Code written against the old name keeps working, with the very same module objects (one
`Kernel` class, not two that fail each other's isinstance checks):

- a real `driver` package elsewhere always wins: the fallback finder sits at the end of
  sys.meta_path and answers `driver` only when no other finder found one;
- in a source checkout on sys.path, the `driver/` folder is found first as `driver`; its
  __init__ then calls `adopt()`, which makes `driver` the same module as `nicsim.driver`;
- once `driver` is `nicsim.driver`, its submodules (`driver.user.verbs`) resolve to the
  `nicsim.driver` ones, never to second copies loaded from the same files.

Transitional: remove when nothing imports `driver` any more.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

OLD, NEW = "driver", "nicsim.driver"


class _Alias(importlib.abc.Loader):
    """Loads `driver.X` as the already imported `nicsim.driver.X` object."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._spec: object = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        mod = importlib.import_module(self.target)
        self._spec = mod.__spec__
        return mod

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the alias spec on the module: give it its own back.
        module.__spec__ = self._spec  # type: ignore[assignment]


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, top_level: bool) -> None:
        self.top_level = top_level

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        if self.top_level:
            if fullname != OLD:
                return None
        elif not fullname.startswith(OLD + ".") or not _adopted():
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(NEW + fullname[len(OLD):]))


def _adopted() -> bool:
    mod = sys.modules.get(OLD)
    return mod is not None and mod is sys.modules.get(NEW)


def install() -> None:
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder(top_level=False))
    sys.meta_path.append(_Finder(top_level=True))


def adopt() -> None:
    """Called by driver/__init__.py when it was imported by its old top-level name: from now
    on `driver` is `nicsim.driver`."""
    sys.modules[OLD] = importlib.import_module(NEW)
