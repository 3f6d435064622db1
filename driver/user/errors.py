"""pyverbs' exceptions (pyverbs.pyverbs_error), with its messages: '<what>. Errno: 22, Invalid
argument' when an errno is known."""

from __future__ import annotations

import os


class PyverbsError(Exception):
    """Base of the verbs library's exceptions."""

    def __init__(self, msg: str, error_code: int = -1) -> None:
        if error_code != -1:
            msg = f"{msg}. Errno: {error_code}, {os.strerror(error_code)}"
        super().__init__(msg)


class PyverbsRDMAError(PyverbsError):
    """A verbs call failed; `error_code` is the errno the kernel or provider returned."""

    def __init__(self, msg: str, error_code: int = -1) -> None:
        super().__init__(msg, error_code)
        self._error_code = error_code

    @property
    def error_code(self) -> int:
        return self._error_code


class PyverbsUserError(PyverbsError):
    """A misuse the library catches itself, with no errno: e.g. using an object after
    close(), or a device name that does not exist."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)


last_errno = 0  # the errno of the last failed verbs call (C's errno, for PyverbsRDMAErrno)


def PyverbsRDMAErrno(msg: str) -> PyverbsRDMAError:  # noqa: N802 - pyverbs' name
    """pyverbs.base.PyverbsRDMAErrno: an error carrying the last verbs errno."""
    return PyverbsRDMAError(msg, last_errno)
