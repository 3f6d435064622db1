"""The reference rates the speed benchmarks measure the model against, in the same process:
bare SimPy (empty timeouts per second) and the minimal packet pipeline, the floor of any honest
packet-level simulator in Python: per packet, build the headers with struct, copy the MTU
payload out of a numpy buffer, compute its zlib.crc32, wait one SimPy timeout for
serialization, and schedule the arrival with one timeout whose callback checks the CRC and
copies the payload into a numpy destination. Rates are per second of process CPU time."""

from __future__ import annotations

import struct
import time
import zlib

import numpy as np
import simpy

MTU = 4096


def bare_simpy(n: int) -> float:
    env = simpy.Environment()

    def proc():  # noqa: ANN202
        for _ in range(n):
            yield env.timeout(1)

    env.process(proc())
    t = time.process_time()
    env.run()
    return n / (time.process_time() - t)


def minimal_pipeline(n: int) -> float:
    env = simpy.Environment()
    src = np.random.default_rng(1).integers(0, 256, MTU * 16, dtype=np.uint8)
    dst = np.zeros_like(src)
    hdr = struct.Struct("!6s6sHBBHHHBBH4s4sHHHHBBHII")
    ser = MTU * 8 / 100.0

    def arrive(frame: bytes, off: int, crc: int) -> None:
        if zlib.crc32(memoryview(frame)[54:]) != crc:
            raise AssertionError("crc")
        dst[off:off + MTU] = np.frombuffer(frame, np.uint8, MTU, 54)

    def proc():  # noqa: ANN202
        for i in range(n):
            off = (i % 16) * MTU
            payload = src[off:off + MTU].tobytes()
            h = hdr.pack(b"\x02" * 6, b"\x02" * 6, 0x800, 0x45, 0, MTU + 48, 0, 0x4000, 64, 17,
                         0, b"\x0a\0\0\x01", b"\x0a\0\0\x02", 0xC000, 4791, MTU + 28, 0, 0x0A,
                         0x40, 0xFFFF, 17, i)
            frame = h + payload
            crc = zlib.crc32(payload)
            yield env.timeout(ser)
            ev = env.timeout(50)
            ev.callbacks.append(lambda _e, f=frame, o=off, c=crc: arrive(f, o, c))

    env.process(proc())
    t = time.process_time()
    env.run()
    return n / (time.process_time() - t)
