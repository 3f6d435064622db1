"""pyverbs.mem_alloc: the simulated process's memory."""

from nicsim.driver.user.memory import *  # noqa: F403
from nicsim.driver.user.memory import (  # noqa: F401 - the names with a trailing underscore
    MAP_ANONYMOUS_,
    MAP_FIXED_,
    MAP_GROWSDOWN_,
    MAP_HUGETLB_,
    MAP_LOCKED_,
    MAP_NORESERVE_,
    MAP_POPULATE_,
    MAP_PRIVATE_,
    MAP_SHARED_,
    MAP_STACK_,
    PROT_EXEC_,
    PROT_NONE_,
    PROT_READ_,
    PROT_WRITE_,
)
