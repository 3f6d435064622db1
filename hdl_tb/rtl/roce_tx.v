`default_nettype none
`include "nic_common.vh"
// roce_tx: RoCEv2 transmit path, roce_tx_framer followed by roce_icrc_insert.
//
// Takes a header descriptor and a payload stream and emits the complete RoCEv2 frame (without
// the Ethernet FCS): Ethernet + IPv4/IPv6 + UDP(4791) + BTH + extension headers + payload +
// pad + ICRC. See roce_tx_framer.v for the descriptor fields and the payload stream rules, and
// roce_icrc_insert.v for the ICRC.
//
// Parameters:
//   DATA_WIDTH  width of the payload and frame tdata in bits (8 * a power of two, >= 32;
//               regressed at 64 and 512).
//   KEEP_WIDTH  DATA_WIDTH/8 (do not override).
//
// Ports:
//   clk, rst        clock; synchronous active-high reset.
//   s_hdr_*         header descriptor (valid/ready, one per frame), exactly as roce_tx_framer.
//   s_axis_*        payload AXI-Stream (tdata/tkeep/tvalid/tready/tlast/tuser), as
//                   roce_tx_framer.
//   m_axis_*        frame AXI-Stream (tdata/tkeep/tvalid/tready/tlast/tuser), packed; tuser = 1
//                   on the last beat marks a frame whose payload was flagged bad (s_axis_tuser)
//                   or did not end where payload_len said.

module roce_tx #(
    parameter DATA_WIDTH = 64,
    parameter KEEP_WIDTH = DATA_WIDTH/8
) (
    input  wire                   clk,
    input  wire                   rst,

    `NIC_ROCE_TX_HDR_PORTS,

    `NIC_AXIS_SLAVE_PORTS(DATA_WIDTH, KEEP_WIDTH),
    input  wire                   s_axis_tuser,

    `NIC_AXIS_MASTER_PORTS(wire, DATA_WIDTH, KEEP_WIDTH),
    output wire                   m_axis_tuser
);

// framer -> ICRC insert
wire [DATA_WIDTH-1:0] f_tdata;
wire [KEEP_WIDTH-1:0] f_tkeep;
wire                  f_tvalid;
wire                  f_tready;
wire                  f_tlast;
wire                  f_tuser;

roce_tx_framer #(
    .DATA_WIDTH(DATA_WIDTH),
    .KEEP_WIDTH(KEEP_WIDTH)
) u_framer (
    .clk(clk),
    .rst(rst),
    .s_hdr_valid(s_hdr_valid),
    .s_hdr_ready(s_hdr_ready),
    .s_hdr_dmac(s_hdr_dmac),
    .s_hdr_smac(s_hdr_smac),
    .s_hdr_ipv6(s_hdr_ipv6),
    .s_hdr_sip(s_hdr_sip),
    .s_hdr_dip(s_hdr_dip),
    .s_hdr_tos(s_hdr_tos),
    .s_hdr_ttl(s_hdr_ttl),
    .s_hdr_flow_label(s_hdr_flow_label),
    .s_hdr_udp_sport(s_hdr_udp_sport),
    .s_hdr_opcode(s_hdr_opcode),
    .s_hdr_solicited(s_hdr_solicited),
    .s_hdr_migreq(s_hdr_migreq),
    .s_hdr_pkey(s_hdr_pkey),
    .s_hdr_fecn(s_hdr_fecn),
    .s_hdr_becn(s_hdr_becn),
    .s_hdr_dqpn(s_hdr_dqpn),
    .s_hdr_ackreq(s_hdr_ackreq),
    .s_hdr_psn(s_hdr_psn),
    .s_hdr_reth_va(s_hdr_reth_va),
    .s_hdr_reth_rkey(s_hdr_reth_rkey),
    .s_hdr_reth_len(s_hdr_reth_len),
    .s_hdr_aeth_syndrome(s_hdr_aeth_syndrome),
    .s_hdr_aeth_msn(s_hdr_aeth_msn),
    .s_hdr_imm(s_hdr_imm),
    .s_hdr_ieth_rkey(s_hdr_ieth_rkey),
    .s_hdr_atomic_va(s_hdr_atomic_va),
    .s_hdr_atomic_rkey(s_hdr_atomic_rkey),
    .s_hdr_atomic_swap_add(s_hdr_atomic_swap_add),
    .s_hdr_atomic_compare(s_hdr_atomic_compare),
    .s_hdr_atomic_orig(s_hdr_atomic_orig),
    .s_hdr_deth_qkey(s_hdr_deth_qkey),
    .s_hdr_deth_src_qp(s_hdr_deth_src_qp),
    .s_hdr_payload_len(s_hdr_payload_len),
    .s_axis_tdata(s_axis_tdata),
    .s_axis_tkeep(s_axis_tkeep),
    .s_axis_tvalid(s_axis_tvalid),
    .s_axis_tready(s_axis_tready),
    .s_axis_tlast(s_axis_tlast),
    .s_axis_tuser(s_axis_tuser),
    .m_axis_tdata(f_tdata),
    .m_axis_tkeep(f_tkeep),
    .m_axis_tvalid(f_tvalid),
    .m_axis_tready(f_tready),
    .m_axis_tlast(f_tlast),
    .m_axis_tuser(f_tuser)
);

roce_icrc_insert #(
    .DATA_WIDTH(DATA_WIDTH),
    .KEEP_WIDTH(KEEP_WIDTH)
) u_icrc (
    .clk(clk),
    .rst(rst),
    .s_axis_tdata(f_tdata),
    .s_axis_tkeep(f_tkeep),
    .s_axis_tvalid(f_tvalid),
    .s_axis_tready(f_tready),
    .s_axis_tlast(f_tlast),
    .s_axis_tuser(f_tuser),
    .m_axis_tdata(m_axis_tdata),
    .m_axis_tkeep(m_axis_tkeep),
    .m_axis_tvalid(m_axis_tvalid),
    .m_axis_tready(m_axis_tready),
    .m_axis_tlast(m_axis_tlast),
    .m_axis_tuser(m_axis_tuser)
);

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXIS_IN("roce_tx payload", DATA_WIDTH, KEEP_WIDTH, 0)
    `NIC_CHECK_AXIS_OUT("roce_tx out", DATA_WIDTH, KEEP_WIDTH, 1)

endmodule

`default_nettype wire
