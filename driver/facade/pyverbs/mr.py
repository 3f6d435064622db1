"""pyverbs.mr."""

from nicsim.driver.user.unsupported import (
    DMMR,
    Buf,
    BufMR,
    DmaBufMR,
    DMAHandle,
    DmaHandleInitAttr,
    MWBind,
    MWBindInfo,
)
from nicsim.driver.user.verbs import MR, MW, MREx

__all__ = ["DMMR", "MR", "MW", "Buf", "BufMR", "DMAHandle", "DmaBufMR", "DmaHandleInitAttr",
           "MREx", "MWBind", "MWBindInfo"]
