"""pyverbs.cmid (RDMA CM): librdmacm over nsnic's kernel connection manager, which carries the
CM protocol in MADs on QP1 (nicsim.driver.user.rdmacm, nicsim.driver.kernel.cm)."""

from nicsim.driver.user.rdma_addrinfo import AddrInfo
from nicsim.driver.user.rdmacm import (
    CMID,
    CMEvent,
    CMEventChannel,
    ConnParam,
    JoinMCAttrEx,
    UDParam,
)

__all__ = ["CMID", "AddrInfo", "CMEvent", "CMEventChannel", "ConnParam", "JoinMCAttrEx",
           "UDParam"]
