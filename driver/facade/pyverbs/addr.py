"""pyverbs.addr. GlobalRoute's hop limit defaults to 1 here, as in pyverbs."""

from nicsim.driver.user import verbs as _v
from nicsim.driver.user.unsupported import GRH
from nicsim.driver.user.verbs import AH, GID, AHAttr


class GlobalRoute(_v.GlobalRoute):
    """ibv_global_route: GlobalRoute(dgid=None, flow_label=0, sgid_index=0, hop_limit=1,
    traffic_class=0)."""

    def __init__(self, dgid: GID | None = None, flow_label: int = 0, sgid_index: int = 0,
                 hop_limit: int = 1, traffic_class: int = 0) -> None:
        super().__init__(dgid, flow_label, sgid_index, hop_limit, traffic_class)


__all__ = ["AH", "GID", "GRH", "AHAttr", "GlobalRoute"]
