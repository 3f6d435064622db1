"""The CRC-32 the wire format uses (nicsim.wire.crc) is zlib's, value for value."""

from __future__ import annotations

import zlib

from hypothesis import given
from hypothesis import strategies as st

from nicsim.wire.crc import crc32


@given(st.binary(max_size=9000), st.integers(0, 0xFFFFFFFF))
def test_crc32_is_zlibs_for_any_bytes_and_start(data: bytes, start: int) -> None:
    assert crc32(data, start) == zlib.crc32(data, start)
    assert crc32(memoryview(data)[1:], start) == zlib.crc32(data[1:], start)
