"""pyverbs.qp. QPAttr here starts from zeros, as pyverbs' does (nicsim's own starts from a
working RC connection's values)."""

from nicsim.driver import enums as _e
from nicsim.driver.user import verbs as _v
from nicsim.driver.user.extended import QPEx
from nicsim.driver.user.unsupported import (
    ECE,
    DataBuffer,
    QPAttachCompCntrAttr,
    QPRateLimitAttr,
)
from nicsim.driver.user.verbs import QP, AHAttr, QPCap, QPInitAttr, QPInitAttrEx


class QPAttr(_v.QPAttr):
    """ibv_qp_attr: QPAttr(qp_state=INIT, cur_qp_state=RESET, port_num=1, path_mtu=1024);
    every other attribute 0 until set."""

    def __init__(self, qp_state: int = _e.IBV_QPS_INIT, cur_qp_state: int = _e.IBV_QPS_RESET,
                 port_num: int = 1, path_mtu: int = _e.IBV_MTU_1024) -> None:
        super().__init__(qp_state=qp_state, cur_qp_state=cur_qp_state, port_num=port_num,
                         path_mtu=path_mtu, max_rd_atomic=0, max_dest_rd_atomic=0,
                         min_rnr_timer=0, timeout=0, retry_cnt=0, rnr_retry=0,
                         ah_attr=AHAttr(), cap=QPCap(0, 0, 0, 0, 0), alt_ah_attr=AHAttr())


__all__ = ["ECE", "QP", "DataBuffer", "QPAttachCompCntrAttr", "QPAttr", "QPCap", "QPEx",
           "QPInitAttr", "QPInitAttrEx", "QPRateLimitAttr"]
