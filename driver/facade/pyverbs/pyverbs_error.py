"""pyverbs.pyverbs_error."""

from nicsim.driver.user.errors import PyverbsError, PyverbsRDMAError, PyverbsUserError

__all__ = ["PyverbsError", "PyverbsRDMAError", "PyverbsUserError"]
