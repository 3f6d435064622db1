"""pyverbs.comp_cntr."""

from nicsim.driver.user.unsupported import CompCntr, CompCntrInitAttr

__all__ = ["CompCntr", "CompCntrInitAttr"]
