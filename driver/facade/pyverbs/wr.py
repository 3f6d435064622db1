"""pyverbs.wr."""

from nicsim.driver import enums as _e
from nicsim.driver.user.verbs import SGE, RecvWR, SendWR


def send_flags_to_str(flags: int) -> str:
    names = [m.name.removeprefix("IBV_SEND_") for m in _e.ibv_send_flags
             if m.value and flags & m.value]
    return " ".join(names) or "None"


__all__ = ["SGE", "RecvWR", "SendWR", "send_flags_to_str"]
