"""The RTL's clock and the Ethernet rate its stream ports carry (no cocotb needed: the
scenario checks of `nicsim run --rtl` use it before any simulator starts)."""

from __future__ import annotations

ETHERNET_RATES_GBPS = (10, 25, 40, 50, 100, 200, 400)
CLK_NS = 4.0  # the co-simulation's RTL clock by default (cosim_world): 250 MHz


def port_rate_gbps(data_width: int, clk_ns: float) -> float:
    """The fastest Ethernet rate whose frames a `data_width`-bit stream at `clk_ns` carries:
    a MAC cannot be held off, so a link faster than the design's port overflows it (64 bits at
    4 ns carry 16 Gb/s: 10 Gb/s Ethernet; 512 bits, 128 Gb/s: 100 Gb/s)."""
    fits = [r for r in ETHERNET_RATES_GBPS if r <= data_width / clk_ns]
    if not fits:
        raise ValueError(f"a {data_width}-bit port at {clk_ns} ns carries "
                         f"{data_width / clk_ns:g} Gb/s, below 10 Gb/s Ethernet")
    return float(fits[-1])
