"""pyverbs.utils: names of values."""

from nicsim.driver import enums as _e
from nicsim.driver.user.errors import PyverbsUserError


def gid_str(subnet_prefix: int, interface_id: int) -> str:
    h = f"{subnet_prefix:016x}{interface_id:016x}"
    return ":".join(h[i:i + 4] for i in range(0, 32, 4))


def gid_str_to_array(val: str) -> list[str]:
    words = val.split(":")
    if len(words) != 8 or any(len(w) != 4 for w in words):
        raise PyverbsUserError(f"Invalid GID value ({words})")
    return [w[i:i + 2] for w in words for i in (0, 2)]


def _name(cls: type, v: int, prefix: str) -> str:
    try:
        return cls(v).name.removeprefix(prefix).replace("_", " ").title()  # type: ignore[call-arg]
    except ValueError:
        return f"Unknown ({v})"


def qp_type_to_str(qp_type: int) -> str:
    return {2: "RC", 3: "UC", 4: "UD", 8: "Raw Packet", 9: "XRC Send", 10: "XRC Recv",
            0xFF: "Driver QP"}.get(qp_type, "Unknown")


def qp_state_to_str(qp_state: int) -> str:
    return {0: "Reset", 1: "Init", 2: "RTR", 3: "RTS", 4: "SQD", 5: "SQE", 6: "Error"}.get(
        qp_state, "Unknown")


def mtu_to_str(mtu: int) -> str:
    return {1: "256", 2: "512", 3: "1024", 4: "2048", 5: "4096"}.get(mtu, "Unknown")


def access_flags_to_str(flags: int) -> str:
    names = [m.name.removeprefix("IBV_ACCESS_") for m in _e.ibv_access_flags
             if m.value and flags & m.value]
    return " ".join(names)


def mig_state_to_str(mig: int) -> str:
    return {0: "Migrated", 1: "Rearm", 2: "Armed"}.get(mig, "Unknown")


def rereg_error_to_str(error: int) -> str:
    return _name(_e.ibv_rereg_mr_err_code, error, "IBV_REREG_MR_ERR_")
