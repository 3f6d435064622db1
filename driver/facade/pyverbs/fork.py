"""pyverbs.fork: ibv_fork_init. The simulated process's memory is not shared with a forked
child's (a child gets its own copy of the world), so fork support is always on."""

from nicsim.driver import enums as _e


def fork_init() -> None:
    """ibv_fork_init: nothing to set up."""


def is_fork_initialized() -> int:
    return int(_e.ibv_fork_status.IBV_FORK_ENABLED)
