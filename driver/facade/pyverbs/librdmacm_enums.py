"""pyverbs.librdmacm_enums: librdmacm's enumerations, and each member by name."""

from nicsim.driver import cm_enums as _e

globals().update({k: v for k, v in vars(_e).items() if k.startswith(("RDMA", "rdma", "RAI"))})
