"""Run at interpreter start under `nicsim exec` (this directory is first on PYTHONPATH): makes
`pyverbs` nicsim's before the program's own directory can shadow it (an rdma-core checkout has
a `pyverbs/` source directory at its top, which `python -m` or `python -c` would find first),
then runs the sitecustomize this one hides, if there is one."""

import importlib.util
import os
import sys

import pyverbs  # noqa: F401 - nicsim's, from this directory

_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    if _entry and os.path.abspath(_entry) == _here:
        continue
    _path = os.path.join(_entry or ".", "sitecustomize.py")
    if os.path.isfile(_path):
        _spec = importlib.util.spec_from_file_location("_nicsim_next_sitecustomize", _path)
        if _spec is not None and _spec.loader is not None:
            _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
        break

from nicsim.exec import threads as _threads  # noqa: E402 - after pyverbs, as above

_threads.install()
