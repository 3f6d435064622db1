"""pyverbs.base."""

from nicsim.driver.user.base import PyverbsCM, PyverbsObject, inc_rkey
from nicsim.driver.user.errors import PyverbsRDMAErrno, PyverbsRDMAError


def close_weakrefs(iterables: list) -> None:
    """Close every object of every iterable (pyverbs closes its children this way)."""
    for it in iterables:
        if it is None:
            continue
        items = list(it)
        if hasattr(it, "clear"):
            it.clear()
        for item in items:
            if item is not None:
                item.close()


__all__ = ["PyverbsCM", "PyverbsObject", "PyverbsRDMAErrno", "PyverbsRDMAError",
           "close_weakrefs", "inc_rkey"]
