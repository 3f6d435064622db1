"""pyverbs.flow."""

from nicsim.driver.user.unsupported import Flow, FlowAction, FlowAttr

__all__ = ["Flow", "FlowAction", "FlowAttr"]
