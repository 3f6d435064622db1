"""Frames for fuzzing a NIC's receive path: random bytes, damaged valid frames, and valid
frames (right ICRC) with random opcodes, PSNs and extension headers aimed at live QPs.

Shared by tests/test_rx_fuzz.py and benchmarks/fuzz_rx.py.
"""

from __future__ import annotations

import random

from nicsim.wire import OPCODES, FrameBuilder, Path, mac_bytes, roce_udp_sport
from nicsim.wire.opcodes import Ext

ALL_OPCODES = sorted(OPCODES)


def builder_to(dst_mac: str, src_mac: str, sip: bytes, dip: bytes) -> FrameBuilder:
    return FrameBuilder(Path(mac_bytes(src_mac), mac_bytes(dst_mac), sip, dip,
                             roce_udp_sport(1, 2)))


def random_valid(rng: random.Random, b: FrameBuilder, qpns: list[int], keys: list[int],
                 addrs: list[int]) -> bytes:
    """A well-formed frame: random opcode, header fields and payload, right ICRC."""
    op = rng.choice(ALL_OPCODES)
    info = OPCODES[op]
    ext = b""
    for x in info.exts:
        if x is Ext.RETH:
            va = rng.choice(addrs) + rng.randint(-64, 8192) if rng.random() < 0.7 else \
                rng.getrandbits(64)
            ext += (va % 2**64).to_bytes(8, "big") + rng.choice(keys + [rng.getrandbits(32)]
                                                                 ).to_bytes(4, "big")
            ext += rng.choice([0, 1, 8, 1024, 4096, rng.getrandbits(32)]).to_bytes(4, "big")
        elif x is Ext.ATOMIC_ETH:
            va = rng.choice(addrs) + rng.randint(-16, 64)
            ext += (va % 2**64).to_bytes(8, "big") + rng.choice(keys).to_bytes(4, "big")
            ext += rng.getrandbits(64).to_bytes(8, "big") + rng.getrandbits(64).to_bytes(8, "big")
        else:
            ext += rng.getrandbits(8 * x.size).to_bytes(x.size, "big")
    payload = rng.randbytes(rng.choice([0, 1, 3, 256, 1024, 1100, 4096])) \
        if info.has_payload else b""
    qpn = rng.choice(qpns) if rng.random() < 0.9 else rng.getrandbits(24)
    return b.build(op, qpn, rng.getrandbits(24) if rng.random() < 0.3 else rng.randint(0, 40),
                   ext, payload, ackreq=rng.random() < 0.5, solicited=rng.random() < 0.1,
                   becn=rng.random() < 0.05, pkey=0xFFFF if rng.random() < 0.95 else
                   rng.getrandbits(16))


def damaged(rng: random.Random, frame: bytes) -> bytes:
    """A valid frame cut short, extended, or with bits flipped or bytes replaced."""
    r = rng.random()
    if r < 0.25:
        return frame[:rng.randrange(0, len(frame))]
    if r < 0.35:
        return frame + rng.randbytes(rng.randint(1, 64))
    b = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(b))
        if rng.random() < 0.5:
            b[i] ^= 1 << rng.randrange(8)
        else:
            b[i] = rng.getrandbits(8)
    return bytes(b)


def fuzz_frame(rng: random.Random, b: FrameBuilder, qpns: list[int], keys: list[int],
               addrs: list[int]) -> bytes:
    r = rng.random()
    if r < 0.2:
        return rng.randbytes(rng.randint(0, 300))
    if r < 0.55:
        return damaged(rng, random_valid(rng, b, qpns, keys, addrs))
    return random_valid(rng, b, qpns, keys, addrs)
