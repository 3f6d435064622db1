"""What benchmarks/hdl_cosim_throughput.py and its cocotb bench (hdl_tb/bench_cosim_throughput.py)
share: the message sizes to stream, and the figures a size's frames give."""

from __future__ import annotations

# (message size, messages): enough small messages that the steady rate shows past the
# pipeline's fill (8 one-packet WRITEs all fit in it), few enough for Icarus at 512 bits
DEFAULT_SIZES = "64:32,256:32,1024:64,4096:16,16384:4,65536:2"
MAX_MESSAGES = 64            # the send queue's depth (hdl_tb.cosim_bench.Side)
MAX_BYTES = 16 << 20         # per host, of its 64 MiB
MTU_ENUM = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}   # IBA 9.6.1.2 path MTU codes


def parse_sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        size, _, n = part.partition(":")
        out.append((int(size), int(n or 4)))
        if out[-1][0] < 1 or not 1 <= out[-1][1] <= MAX_MESSAGES:
            raise ValueError(f"{part!r}: a size of at least 1 and 1 to {MAX_MESSAGES} messages")
    if sum(size * n for size, n in out) > MAX_BYTES:
        raise ValueError(f"more than {MAX_BYTES >> 20} MiB in all")
    return out


def size_figures(g: dict, lanes: int, clk_ns: float,
                 pcie: tuple[float, int] | None = None) -> dict:
    """Cycles per packet from the first frame's start to the last's, the ideal for the same
    frames, payload Gb/s; within messages and between them. With `pcie` (the DMA link's bytes
    per ns and per-TLP overhead): the payload rate the link's read completions allow, i.e.
    the payload over the time the completions of all the size's reads (WQEs and payload)
    occupy the host-to-device direction."""
    fr = g["frames"]
    ideal_of = [-(-f["bytes"] // lanes) for f in fr]
    row = {"size": g["size"], "messages": g["messages"], "frames": len(fr)}
    if len(fr) < 2:
        return row
    span = (fr[-1]["start_ns"] - fr[0]["start_ns"]) / clk_ns
    gaps = [(fr[i + 1]["start_ns"] - fr[i]["start_ns"]) / clk_ns for i in range(len(fr) - 1)]
    same = [i for i in range(len(fr) - 1) if fr[i]["message"] == fr[i + 1]["message"]]
    cross = [i for i in range(len(fr) - 1) if fr[i]["message"] != fr[i + 1]["message"]]
    payload = sum(f["payload"] for f in fr[:-1])
    row |= {"cycles_per_packet": span / (len(fr) - 1),
            "ideal_cycles_per_packet": sum(ideal_of[:-1]) / (len(fr) - 1),
            "payload_gbps": payload * 8 / (span * clk_ns),
            "first_frame_after_post_ns": fr[0]["start_ns"] - g["post_ns"],
            "messages_per_s_wall": g["messages"] / g["wall_s"],
            "rtl_wall_share": g["rtl_wall_s"] / g["wall_s"]}
    if same:
        row["in_message_cycles_per_packet"] = sum(gaps[i] for i in same) / len(same)
        row["in_message_ideal"] = sum(ideal_of[i] for i in same) / len(same)
    if cross:
        row["between_messages_cycles"] = sum(gaps[i] for i in cross) / len(cross)
        row["between_messages_ideal"] = sum(ideal_of[i] for i in cross) / len(cross)
    row["fraction_of_ideal"] = row["ideal_cycles_per_packet"] / row["cycles_per_packet"]
    if pcie and "read_bytes" in g:
        bpns, overhead = pcie
        busy_ns = (g["read_bytes"] + g["read_tlps"] * overhead) / bpns
        row["pcie_bound_gbps"] = sum(f["payload"] for f in fr) * 8 / busy_ns
    return row
