"""AETH encoding (IBA 9.7.5.1): syndromes, end-to-end credit counts, RNR timer values.

Shared by the responder, which builds ACKs and NAKs, and the completer, which reads them.
"""

from __future__ import annotations

from bisect import bisect_right


class Syndrome:
    """AETH syndromes (IBA table 43): the top 3 bits are the class, the low 5 a value."""

    ACK = 0x00  # | credit count
    RNR_NAK = 0x20  # | RNR timer
    NAK_PSN_SEQ = 0x60
    NAK_INV_REQ = 0x61
    NAK_REM_ACCESS = 0x62
    NAK_REM_OP = 0x63
    NAK_INV_RD_REQ = 0x64
    CREDITS_UNLIMITED = 0x1F


# Credit count encoding (IBA table 44): AETH credit code -> receive WQEs.
CREDITS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768,
           1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768)

# RNR timer field (IBA table 45), in microseconds: code 0 is 655.36 ms, codes 1..31 run from
# 0.01 ms to 491.52 ms.
RNR_US = (655360.0, 10.0, 20.0, 30.0, 40.0, 60.0, 80.0, 120.0, 160.0, 240.0, 320.0, 480.0,
          640.0, 960.0, 1280.0, 1920.0, 2560.0, 3840.0, 5120.0, 7680.0, 10240.0, 15360.0,
          20480.0, 30720.0, 40960.0, 61440.0, 81920.0, 122880.0, 163840.0, 245760.0,
          327680.0, 491520.0)


def credit_code(free: int) -> int:
    """The largest AETH credit code whose count does not exceed `free` receive WQEs."""
    return bisect_right(CREDITS, free) - 1


def rnr_timer_ns(code: int) -> float:
    """The RNR NAK timer field decoded, in ns."""
    return RNR_US[code & 0x1F] * 1000.0
