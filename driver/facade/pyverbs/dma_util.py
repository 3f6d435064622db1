"""pyverbs.dma_util: barriers and MMIO stores of a provider's own data path. A program under
nicsim has no device memory mapped: the barriers order nothing, the MMIO stores refuse."""

from nicsim.driver.user.unsupported import unsupported


def udma_to_dev_barrier() -> None:
    """Nothing to order: the simulated process's stores are seen in program order."""


def udma_from_dev_barrier() -> None:
    """Nothing to order: the simulated process's loads are seen in program order."""


def mmio_write64_as_be(addr: int, val: int) -> None:
    raise unsupported("MMIO write", "no device memory is mapped into the simulated process")


def mmio_write32_as_be(addr: int, val: int) -> None:
    raise unsupported("MMIO write", "no device memory is mapped into the simulated process")
