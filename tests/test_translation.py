"""The translation rule the model and the RTL share: checks in hardware order, and the
segments of a range as a byte-by-byte walk through the MTT would give them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nicsim.hwif import Access, Mpt, MptFlags, XlateStatus
from nicsim.nic.translation import TranslationCache, Walk, check, split


def _bytewise(mpt: Mpt, mtt: dict[int, int], va: int, length: int) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    shift = mpt.page_shift
    for b in range(va, va + length):
        pa = mtt[mpt.mtt_index + (b >> shift) - (mpt.start >> shift)] + (b & ((1 << shift) - 1))
        if out and out[-1][0] + out[-1][1] == pa:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((pa, 1))
    return out


@settings(max_examples=300, deadline=None)
@given(start=st.integers(0, 1 << 40), mr_len=st.integers(1, 5 * 4096), data=st.data(),
       shift=st.sampled_from([12, 13]), contiguous=st.lists(st.booleans(), min_size=8,
                                                             max_size=8))
def test_split_matches_a_bytewise_walk(start, mr_len, data, shift, contiguous):
    npages = ((start + mr_len - 1) >> shift) - (start >> shift) + 1
    pas, pa = [], 1 << 30
    for i in range(npages):
        pa = pa + (1 << shift) if contiguous[i % 8] else pa + (7 << shift)
        pas.append(pa)
    mtt = {3 + i: v for i, v in enumerate(pas)}
    mpt = Mpt(0x105, 1, start, mr_len, 3, Access.LOCAL_WRITE, MptFlags.VALID, shift)
    off = data.draw(st.integers(0, mr_len - 1))
    length = data.draw(st.integers(0, mr_len - off))
    assert split(mpt, mtt, start + off, length) == _bytewise(mpt, mtt, start + off, length)


def test_check_order_and_statuses():
    m = Mpt(0x105, 7, 0x1000, 0x1000, 0, Access.REMOTE_READ, MptFlags.VALID)
    ok = (0x105, 7, Access.REMOTE_READ, 0x1000, 0x1000)
    assert check(m, *ok) is XlateStatus.OK
    assert check(None, *ok) is XlateStatus.BAD_KEY
    assert check(m, 0x106, 7, Access.REMOTE_READ, 0x1000, 8) is XlateStatus.BAD_KEY  # variant
    # Several violations at once: the first in hardware order wins.
    assert check(m, 0x105, 8, Access.REMOTE_WRITE, 0, 1 << 20) is XlateStatus.PD_MISMATCH
    assert check(m, 0x105, 7, Access.REMOTE_WRITE, 0, 1 << 20) is XlateStatus.ACCESS
    assert check(m, 0x105, 7, Access.REMOTE_READ, 0x1FFF, 2) is XlateStatus.BOUNDS
    assert check(m, 0x105, 7, Access.REMOTE_READ, 0xFFF, 1) is XlateStatus.BOUNDS


@settings(max_examples=200, deadline=None)
@given(start=st.integers(0, 1 << 30), mr_len=st.integers(1, 40 * 4096), data=st.data(),
       contiguous=st.lists(st.booleans(), min_size=8, max_size=8))
def test_walk_gives_the_same_bytes_a_chunk_at_a_time(start, mr_len, data, contiguous):
    """Walking a buffer through the MTT in steps (as a message advances) gives the bytes a
    whole translation gives, and never rewrites a segment already handed out: a consumer's
    position into the list stays valid even when the next chunk starts on a page
    physically contiguous with the last one."""
    npages = ((start + mr_len - 1) >> 12) - (start >> 12) + 1
    pas, pa = [], 1 << 30
    for i in range(npages):
        pa = pa + 4096 if contiguous[i % 8] else pa + 7 * 4096
        pas.append(pa)
    mtt = {i: v for i, v in enumerate(pas)}
    mpt = Mpt(0x105, 1, start, mr_len, 0, Access.LOCAL_WRITE, MptFlags.VALID)
    x = TranslationCache(lambda a, n: bytes(n), 16, 1 << 16)
    x.mtt_entries = 1 << 16
    x._mtt.update(mtt)  # the cache holds the whole table: no fetches
    w = Walk([(mpt, start, mr_len)])
    seen: list[tuple[int, int]] = []
    while w.covered < mr_len:
        x.walk(w, w.covered + data.draw(st.integers(1, 3 * 65536)))
        assert w.segs[:len(seen)] == seen
        seen = list(w.segs)
    flat = [p + i for p, n in w.segs for i in range(n)]
    assert flat == [p + i for p, n in _bytewise(mpt, mtt, start, mr_len) for i in range(n)]
    assert w.covered == mr_len


def test_a_walk_sees_mtt_entries_as_the_cache_holds_them_now():
    """The walk remembers chunks' segments; what it hands out must still be what the MTT
    cache holds: after an invalidation, and after the lines were evicted and fetched again
    from a table that changed meanwhile."""
    table = bytearray(8 * 64)  # 64 MTT entries in "host memory"

    def put(first: int, pas: list[int]) -> None:
        for i, pa in enumerate(pas):
            table[(first + i) * 8:(first + i + 1) * 8] = pa.to_bytes(8, "little")

    x = TranslationCache(lambda a, n: bytes(table[a:a + n]), 16, 16)  # 16 entries: 2 lines
    x.mtt_entries = 64
    a = Mpt(0x105, 1, 0, 4 * 4096, 0, Access.LOCAL_WRITE, MptFlags.VALID)
    b = Mpt(0x205, 1, 0, 16 * 4096, 8, Access.LOCAL_WRITE, MptFlags.VALID)

    def segs(mpt: Mpt) -> list[tuple[int, int]]:
        w = Walk([(mpt, 0, mpt.length)])
        x.walk(w, mpt.length)
        return w.segs

    put(0, [0x10000, 0x30000, 0x50000, 0x70000])
    put(8, [0x100000 + i * 0x2000 for i in range(16)])
    first = [(0x10000, 4096), (0x30000, 4096), (0x50000, 4096), (0x70000, 4096)]
    assert segs(a) == first
    assert segs(a) == first  # (remembered)
    put(0, [0x90000, 0x91000, 0xA0000, 0xB0000])
    assert segs(a) == first  # the cache still holds the old line: so does the NIC
    x.invalidate_mtt(0, 4)
    assert segs(a) == [(0x90000, 8192), (0xA0000, 4096), (0xB0000, 4096)]
    put(0, [0x20000, 0x40000, 0x60000, 0x80000])
    segs(b)  # two lines: a's line is evicted
    assert segs(a) == [(0x20000, 4096), (0x40000, 4096), (0x60000, 4096), (0x80000, 4096)]
