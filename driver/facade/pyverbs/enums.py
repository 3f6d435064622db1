"""pyverbs.enums: the name older pyverbs (and most examples written for it) import the
libibverbs enumerations by; newer rdma-core calls it pyverbs.libibverbs_enums."""

from pyverbs.libibverbs_enums import *  # noqa: F403
from pyverbs.librdmacm_enums import *  # noqa: F403
