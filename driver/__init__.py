"""The host software that drives the nsnic device, installed as `nicsim.driver` (setup.py):
`kernel/` (ib_core, uverbs, the vendor driver) and `user/` (the verbs library and provider),
with `facade/pyverbs`, the pyverbs-compatible public face that `nicsim exec` puts on a
program's import path. Its one import name is `nicsim.driver`."""

if __name__ == "driver":  # the folder found as a top-level package from a source checkout
    raise ImportError("nicsim's driver is imported as nicsim.driver, not as driver")
