"""pyverbs.base: the bases of pyverbs' objects, and ibv_inc_rkey."""

from __future__ import annotations

import logging


class PyverbsObject:
    """Every pyverbs object: it has a logger named after its class."""

    def set_log_level(self, val: int) -> None:
        logging.getLogger(type(self).__name__).setLevel(val)


class PyverbsCM(PyverbsObject):
    """An object that is also a context manager, closed on exit."""

    def __enter__(self):  # noqa: ANN204
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass


def inc_rkey(rkey: int) -> int:
    """ibv_inc_rkey: the next key of a memory window's index (the low byte is the variant a
    consumer chooses on each bind, IBA 10.6.7.2.2)."""
    return (rkey & 0xFFFFFF00) | ((rkey + 1) & 0xFF)
