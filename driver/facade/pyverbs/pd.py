"""pyverbs.pd."""

from nicsim.driver.user.unsupported import (
    ParentDomain,
    ParentDomainContext,
    ParentDomainInitAttr,
)
from nicsim.driver.user.verbs import PD

__all__ = ["PD", "ParentDomain", "ParentDomainContext", "ParentDomainInitAttr"]
