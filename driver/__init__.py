"""The host software that drives the nsnic device, installed as `nicsim.driver` (setup.py):
`kernel/` (ib_core, uverbs, the vendor driver) and `user/` (the verbs library and provider),
with `facade/pyverbs`, the pyverbs-compatible public face that `nicsim exec` puts on a
program's import path."""

if __name__ == "driver":  # imported by its old name from a source checkout: see the module
    from nicsim._compat_driver import adopt

    adopt()
