"""pyverbs.srq."""

from nicsim.driver.user.unsupported import SRQ, OpsWr, SrqAttr, SrqInitAttr, SrqInitAttrEx

__all__ = ["SRQ", "OpsWr", "SrqAttr", "SrqInitAttr", "SrqInitAttrEx"]
