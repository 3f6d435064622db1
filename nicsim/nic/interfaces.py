"""What one NIC block asks of another that is built on it: the few calls that go against the
grain of the blocks' order (the completer telling the requester of progress, the send engine
giving the requester its turn, a UD send handing a faulted WQE back). As Protocols, so that no
block's module imports a block that imports it (the NIC wires the blocks together)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol

import simpy

from nicsim.nic.qp import QpCtx, SendOp


class Requests(Protocol):
    """The requester, as the completer sees it."""

    def restart_timer(self, qp: QpCtx) -> None: ...

    def first_unacked(self, qp: QpCtx) -> int: ...

    def still_valid(self, sop: SendOp) -> bool: ...


class Turns(Protocol):
    """The requester, as the send engine sees it: one turn of a QP at a time."""

    def turn(self, qp: QpCtx, quantum: int) -> Generator[simpy.Event, None, bool]: ...


class Stalls(Protocol):
    """The requester, as the UD send path sees it: a WQE whose page is not present waits."""

    def stall(self, qp: QpCtx, wqe: Any) -> None: ...

