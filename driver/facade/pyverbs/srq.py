"""pyverbs.srq."""

from nicsim.driver.user.unsupported import OpsWr, SrqAttr, SrqInitAttr, SrqInitAttrEx
from nicsim.driver.user.verbs import SRQ

__all__ = ["SRQ", "OpsWr", "SrqAttr", "SrqInitAttr", "SrqInitAttrEx"]
