// roce_rx: RoCEv2 receive path, roce_icrc_check -> roce_rx_parser.
//
// In: whole Ethernet frames without FCS (any tkeep pattern: roce_icrc_check packs them).
// roce_icrc_check flags frames whose ICRC is wrong (tuser on the last beat); roce_rx_parser
// splits the frames into accepted RoCEv2 packets (metadata + payload), bypass frames (not
// IPv4/IPv6 + UDP 4791, unchanged) and drops (counted by reason). See roce_rx_parser.v for
// the ports' meaning, the drop order and the buffering.
//
// Parameters:
//   DATA_WIDTH         - AXI-Stream data width in bits (64, 128, 256 or 512: what
//                        roce_icrc_check supports).
//   KEEP_WIDTH         - DATA_WIDTH/8.
//   PAYLOAD_FIFO_DEPTH, BYPASS_FIFO_DEPTH, META_FIFO_DEPTH
//                      - roce_rx_parser's FIFO depths (beats, beats, records; powers of two).
//
// Ports:
//   clk, rst           - clock, synchronous active-high reset.
//   s_axis_*           - input frames; s_axis_tuser (last beat) = an upstream error: such a
//                        frame is dropped as bad_icrc if it is otherwise a good RoCE packet,
//                        passed with m_bypass_tuser = 1 if it is a bypass frame.
//   m_axis_*, m_bypass_*, m_meta_*, stat_* - as roce_rx_parser.
//   Note: m_bypass_tuser of an IPv4/IPv6 bypass frame also carries roce_icrc_check's
//   (meaningless for non-RoCE traffic) ICRC verdict.

`default_nettype none
`include "nic_common.vh"

module roce_rx #(
    parameter DATA_WIDTH = 64,
    parameter KEEP_WIDTH = DATA_WIDTH/8,
    parameter PAYLOAD_FIFO_DEPTH = 8192/KEEP_WIDTH,
    parameter BYPASS_FIFO_DEPTH = 4096/KEEP_WIDTH,
    parameter META_FIFO_DEPTH = 16
) (
    input  wire                  clk,
    input  wire                  rst,
    `NIC_AXIS_SLAVE_PORTS(DATA_WIDTH, KEEP_WIDTH),
    input  wire                  s_axis_tuser,
    `NIC_AXIS_MASTER_PORTS(wire, DATA_WIDTH, KEEP_WIDTH),
    output wire [DATA_WIDTH-1:0] m_bypass_tdata,
    output wire [KEEP_WIDTH-1:0] m_bypass_tkeep,
    output wire                  m_bypass_tvalid,
    input  wire                  m_bypass_tready,
    output wire                  m_bypass_tlast,
    output wire                  m_bypass_tuser,
    `NIC_ROCE_RX_META_PORTS,
    `NIC_ROCE_RX_STAT_PORTS(wire)
);

    wire [DATA_WIDTH-1:0] c_axis_tdata;
    wire [KEEP_WIDTH-1:0] c_axis_tkeep;
    wire                  c_axis_tvalid, c_axis_tready, c_axis_tlast, c_axis_tuser;
    /* verilator lint_off UNUSEDSIGNAL */
    wire                  icrc_bad_pulse;  // the parser counts bad ICRCs of RoCE packets
    /* verilator lint_on UNUSEDSIGNAL */

    roce_icrc_check #(
        .DATA_WIDTH(DATA_WIDTH),
        .KEEP_WIDTH(KEEP_WIDTH)
    ) u_icrc_check (
        .clk(clk),
        .rst(rst),
        .s_axis_tdata(s_axis_tdata),
        .s_axis_tkeep(s_axis_tkeep),
        .s_axis_tvalid(s_axis_tvalid),
        .s_axis_tready(s_axis_tready),
        .s_axis_tlast(s_axis_tlast),
        .s_axis_tuser(s_axis_tuser),
        .m_axis_tdata(c_axis_tdata),
        .m_axis_tkeep(c_axis_tkeep),
        .m_axis_tvalid(c_axis_tvalid),
        .m_axis_tready(c_axis_tready),
        .m_axis_tlast(c_axis_tlast),
        .m_axis_tuser(c_axis_tuser),
        .stat_bad_icrc(icrc_bad_pulse)
    );

    roce_rx_parser #(
        .DATA_WIDTH(DATA_WIDTH),
        .KEEP_WIDTH(KEEP_WIDTH),
        .PAYLOAD_FIFO_DEPTH(PAYLOAD_FIFO_DEPTH),
        .BYPASS_FIFO_DEPTH(BYPASS_FIFO_DEPTH),
        .META_FIFO_DEPTH(META_FIFO_DEPTH)
    ) u_parser (
        .clk(clk),
        .rst(rst),
        .s_axis_tdata(c_axis_tdata),
        .s_axis_tkeep(c_axis_tkeep),
        .s_axis_tvalid(c_axis_tvalid),
        .s_axis_tready(c_axis_tready),
        .s_axis_tlast(c_axis_tlast),
        .s_axis_tuser(c_axis_tuser),
        .m_axis_tdata(m_axis_tdata),
        .m_axis_tkeep(m_axis_tkeep),
        .m_axis_tvalid(m_axis_tvalid),
        .m_axis_tready(m_axis_tready),
        .m_axis_tlast(m_axis_tlast),
        .m_bypass_tdata(m_bypass_tdata),
        .m_bypass_tkeep(m_bypass_tkeep),
        .m_bypass_tvalid(m_bypass_tvalid),
        .m_bypass_tready(m_bypass_tready),
        .m_bypass_tlast(m_bypass_tlast),
        .m_bypass_tuser(m_bypass_tuser),
        .m_meta_valid(m_meta_valid),
        .m_meta_ready(m_meta_ready),
        .m_meta_dmac(m_meta_dmac),
        .m_meta_smac(m_meta_smac),
        .m_meta_ipv6(m_meta_ipv6),
        .m_meta_sip(m_meta_sip),
        .m_meta_dip(m_meta_dip),
        .m_meta_tos(m_meta_tos),
        .m_meta_udp_sport(m_meta_udp_sport),
        .m_meta_opcode(m_meta_opcode),
        .m_meta_solicited(m_meta_solicited),
        .m_meta_migreq(m_meta_migreq),
        .m_meta_padcount(m_meta_padcount),
        .m_meta_pkey(m_meta_pkey),
        .m_meta_fecn(m_meta_fecn),
        .m_meta_becn(m_meta_becn),
        .m_meta_dqpn(m_meta_dqpn),
        .m_meta_ackreq(m_meta_ackreq),
        .m_meta_psn(m_meta_psn),
        .m_meta_flags(m_meta_flags),
        .m_meta_payload_len(m_meta_payload_len),
        .m_meta_reth_va(m_meta_reth_va),
        .m_meta_reth_rkey(m_meta_reth_rkey),
        .m_meta_reth_len(m_meta_reth_len),
        .m_meta_aeth_syndrome(m_meta_aeth_syndrome),
        .m_meta_aeth_msn(m_meta_aeth_msn),
        .m_meta_imm(m_meta_imm),
        .m_meta_ieth_rkey(m_meta_ieth_rkey),
        .m_meta_atomic_va(m_meta_atomic_va),
        .m_meta_atomic_rkey(m_meta_atomic_rkey),
        .m_meta_atomic_swap_add(m_meta_atomic_swap_add),
        .m_meta_atomic_compare(m_meta_atomic_compare),
        .m_meta_atomic_orig(m_meta_atomic_orig),
        .m_meta_deth_qkey(m_meta_deth_qkey),
        .m_meta_deth_src_qp(m_meta_deth_src_qp),
        .stat_rx_packets(stat_rx_packets),
        .stat_bypass(stat_bypass),
        .stat_drop_bad_icrc(stat_drop_bad_icrc),
        .stat_drop_truncated(stat_drop_truncated),
        .stat_drop_bad_ip_version(stat_drop_bad_ip_version),
        .stat_drop_bad_ip_header(stat_drop_bad_ip_header),
        .stat_drop_bad_ip_checksum(stat_drop_bad_ip_checksum),
        .stat_drop_bad_ip_length(stat_drop_bad_ip_length),
        .stat_drop_bad_udp_length(stat_drop_bad_udp_length),
        .stat_drop_unknown_opcode(stat_drop_unknown_opcode),
        .stat_drop_bad_transport_version(stat_drop_bad_transport_version),
        .stat_drop_short_headers(stat_drop_short_headers),
        .stat_drop_bad_padcount(stat_drop_bad_padcount),
        .stat_drop_oversize(stat_drop_oversize)
    );

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXIS_IN("roce_rx in", DATA_WIDTH, KEEP_WIDTH, 1)
    `NIC_CHECK_AXIS_OUT("roce_rx out", DATA_WIDTH, KEEP_WIDTH, 0)

endmodule

`default_nettype wire
