"""pyverbs.libibverbs_enums: every libibverbs enumeration, and each member by name."""

from nicsim.driver import enums as _e

globals().update({k: v for k, v in vars(_e).items() if k.startswith(("IBV_", "ibv_", "_IBV_"))})
