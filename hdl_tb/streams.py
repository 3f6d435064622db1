"""The RTL's valid/ready stream ports that more than one bench drives or watches, as
cocotbext-axi stream models (`define_stream`: bus, transaction, source, sink, monitor), so
every bench sees a port with the same signals.
"""

from __future__ import annotations

from cocotbext.axi.stream import define_stream

# roce_tx_framer's and roce_tx's header descriptor besides valid/ready, as s_hdr_<name> ports:
# name -> width in bits.
HDR_FIELDS = {
    "dmac": 48, "smac": 48, "ipv6": 1, "sip": 128, "dip": 128, "tos": 8, "ttl": 8,
    "flow_label": 20, "udp_sport": 16, "opcode": 8, "solicited": 1, "migreq": 1, "pkey": 16,
    "fecn": 1, "becn": 1, "dqpn": 24, "ackreq": 1, "psn": 24, "reth_va": 64, "reth_rkey": 32,
    "reth_len": 32, "aeth_syndrome": 8, "aeth_msn": 24, "imm": 32, "ieth_rkey": 32,
    "atomic_va": 64, "atomic_rkey": 32, "atomic_swap_add": 64, "atomic_compare": 64,
    "atomic_orig": 64, "deth_qkey": 32, "deth_src_qp": 24, "payload_len": 16,
}

HdrBus, HdrTransaction, HdrSource, HdrSink, HdrMonitor = define_stream(
    "RoceTxHdr", signals=["valid", "ready", *HDR_FIELDS])

# wqe_fetch's output: one send WQE (m_wqe_*)
WqeBus, WqeTransaction, WqeSource, WqeSink, WqeMonitor = define_stream(
    "Wqe", signals=["valid", "ready", "qpn", "index", "opcode", "flags", "num_sge", "imm_inv",
                    "remote_addr", "rkey", "inline_len", "compare_add", "swap", "dest_qpn",
                    "qkey", "sge_addr", "sge_len", "sge_lkey", "err"])
# mr_translate's lookup port: a request, and per page of it a response segment
MrReqBus, MrReqTransaction, MrReqSource, MrReqSink, MrReqMonitor = define_stream(
    "MrReq", signals=["valid", "ready", "key", "pd", "access", "va", "len", "tag"])
MrRspBus, MrRspTransaction, MrRspSource, MrRspSink, MrRspMonitor = define_stream(
    "MrRsp", signals=["valid", "ready", "status", "pa", "len", "last", "tag"])
# cqe_write's input: one completion for a CQ (s_cqe_*)
CqeInBus, CqeInTransaction, CqeInSource, CqeInSink, CqeInMonitor = define_stream(
    "CqeIn", signals=["valid", "ready", "cqn", "qpn", "wqe_index", "opcode", "status",
                      "byte_len", "imm_inv", "src_qp", "flags", "vendor_err"])
