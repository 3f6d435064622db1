"""pyverbs.providers.efa.efadv: EFA direct verbs. nsnic is not an EFA device: creating
any of these objects fails with PyverbsUserError, as pyverbs' do on other devices."""

from nicsim.driver.user.unsupported import other_vendor

EfaContext = other_vendor("EfaContext", "EFA")
EfaDVDeviceAttr = other_vendor("EfaDVDeviceAttr", "EFA")
EfaDVAHAttr = other_vendor("EfaDVAHAttr", "EFA")
EfaAH = other_vendor("EfaAH", "EFA")
SRDQP = other_vendor("SRDQP", "EFA")
EfaQPInitAttr = other_vendor("EfaQPInitAttr", "EFA")
SRDQPEx = other_vendor("SRDQPEx", "EFA")
EfaDVCQInitAttr = other_vendor("EfaDVCQInitAttr", "EFA")
EfaCQ = other_vendor("EfaCQ", "EFA")
EfaDVMRAttr = other_vendor("EfaDVMRAttr", "EFA")
EfaMR = other_vendor("EfaMR", "EFA")
EfaDVSQDepthAttr = other_vendor("EfaDVSQDepthAttr", "EFA")
EfaDVRQDepthAttr = other_vendor("EfaDVRQDepthAttr", "EFA")
EfaCompCntrInitAttr = other_vendor("EfaCompCntrInitAttr", "EFA")
EfaCompCntr = other_vendor("EfaCompCntr", "EFA")


def dev_cap_to_str(flags: int) -> str:
    return f"0x{flags:x}"
