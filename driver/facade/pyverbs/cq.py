"""pyverbs.cq."""

from nicsim.driver.user.unsupported import CQEX, CompChannel, CqInitAttrEx, PollCqAttr, WcTmInfo
from nicsim.driver.user.verbs import CQ, WC

__all__ = ["CQ", "CQEX", "WC", "CompChannel", "CqInitAttrEx", "PollCqAttr", "WcTmInfo"]
