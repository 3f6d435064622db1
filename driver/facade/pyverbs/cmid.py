"""pyverbs.cmid (RDMA CM): not in nsnic yet, every object answers EOPNOTSUPP."""

from nicsim.driver.user.unsupported import (
    CMID,
    AddrInfo,
    CMEvent,
    CMEventChannel,
    ConnParam,
    JoinMCAttrEx,
    UDParam,
)

__all__ = ["CMID", "AddrInfo", "CMEvent", "CMEventChannel", "ConnParam", "JoinMCAttrEx",
           "UDParam"]
