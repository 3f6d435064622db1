"""pyverbs.wq."""

from nicsim.driver.user.unsupported import (
    WQ,
    RwqIndTable,
    RwqIndTableInitAttr,
    RxHashConf,
    WQAttr,
    WQInitAttr,
)

__all__ = ["WQ", "RwqIndTable", "RwqIndTableInitAttr", "RxHashConf", "WQAttr", "WQInitAttr"]
