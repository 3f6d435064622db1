"""pyverbs.xrcd."""

from nicsim.driver.user.unsupported import XRCD, XRCDInitAttr

__all__ = ["XRCD", "XRCDInitAttr"]
