"""CRC-32 (the IEEE 802.3 polynomial that the ICRC uses, IBA 7.8.1), from ISA-L when it is
installed (a dependency of nicsim): its carry-less-multiply kernel is about nine times
zlib's on a 4 KiB payload, and every frame a tap, a fault or a switch sees has its ICRC
computed. zlib gives the same values (tests/test_wire_crc.py), only slower."""

from __future__ import annotations

try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover (a platform without an ISA-L wheel)
    from zlib import crc32

__all__ = ["crc32"]
