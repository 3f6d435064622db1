"""pyverbs.dmabuf."""

from nicsim.driver.user.unsupported import DmaBuf

__all__ = ["DmaBuf"]
