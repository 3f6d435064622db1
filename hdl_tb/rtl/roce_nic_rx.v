`default_nettype none
`include "nic_common.vh"
// roce_nic_rx: the NIC's receive front end: roce_rx (ICRC check, parser) with the metadata
// fields the NIC's engines use, the payload stream, and one drop counter (the sum of
// roce_rx's drop reasons). Non-RoCE frames (bypass) are dropped and counted: the NIC has no
// other protocol.
//
// Parameters:
//   DATA_WIDTH    stream width (64..512)
//
// Ports:
//   clk, rst      clock, synchronous active-high reset
//   s_axis_*      Ethernet frames in (no FCS; tuser on the last beat: bad frame)
//   m_meta_*      one record per good RoCE packet (roce_rx_parser.v field meanings)
//   m_axis_*      the packets' payload, in the same order (packed; none for an empty one)
//   stat_packets  RoCE packets accepted
//   stat_drops    frames dropped (any roce_rx reason, or not RoCE)
module roce_nic_rx #(
    parameter DATA_WIDTH = 64
) (
    input  wire                    clk,
    input  wire                    rst,

    `NIC_AXIS_SLAVE_PORTS(DATA_WIDTH, DATA_WIDTH/8),
    input  wire                    s_axis_tuser,

    output wire                    m_meta_valid,
    input  wire                    m_meta_ready,
    output wire [47:0]             m_meta_dmac,
    output wire                    m_meta_ipv6,
    output wire [127:0]            m_meta_sip,
    output wire [127:0]            m_meta_dip,
    output wire [7:0]              m_meta_opcode,
    output wire                    m_meta_solicited,
    output wire [1:0]              m_meta_padcount,
    output wire [15:0]             m_meta_pkey,
    output wire [23:0]             m_meta_dqpn,
    output wire                    m_meta_ackreq,
    output wire [23:0]             m_meta_psn,
    output wire [15:0]             m_meta_payload_len,
    output wire [63:0]             m_meta_reth_va,
    output wire [31:0]             m_meta_reth_rkey,
    output wire [31:0]             m_meta_reth_len,
    output wire [7:0]              m_meta_aeth_syndrome,
    output wire [23:0]             m_meta_aeth_msn,
    output wire [31:0]             m_meta_imm,
    output wire [31:0]             m_meta_ieth_rkey,
    output wire [63:0]             m_meta_atomic_va,
    output wire [31:0]             m_meta_atomic_rkey,
    output wire [63:0]             m_meta_atomic_swap_add,
    output wire [63:0]             m_meta_atomic_compare,
    output wire [63:0]             m_meta_atomic_orig,

    `NIC_AXIS_MASTER_PORTS(wire, DATA_WIDTH, DATA_WIDTH/8),

    output wire [31:0]             stat_packets,
    output reg  [31:0]             stat_drops
);

    localparam KW = DATA_WIDTH / 8;

    wire [DATA_WIDTH-1:0] byp_tdata;
    wire [KW-1:0]         byp_tkeep;
    wire                  byp_tvalid;
    wire                  byp_tlast;
    wire                  byp_tuser;
    wire [31:0] s_byp, s_icrc, s_trunc, s_ipv, s_iph, s_ipc, s_ipl, s_udpl, s_op, s_tver,
                s_short, s_pad, s_over;

    /* verilator lint_off PINCONNECTEMPTY */
    roce_rx #(
        .DATA_WIDTH(DATA_WIDTH),
        .KEEP_WIDTH(KW)
    ) u_rx (
        .clk(clk),
        .rst(rst),
        .s_axis_tdata(s_axis_tdata),
        .s_axis_tkeep(s_axis_tkeep),
        .s_axis_tvalid(s_axis_tvalid),
        .s_axis_tready(s_axis_tready),
        .s_axis_tlast(s_axis_tlast),
        .s_axis_tuser(s_axis_tuser),
        .m_axis_tdata(m_axis_tdata),
        .m_axis_tkeep(m_axis_tkeep),
        .m_axis_tvalid(m_axis_tvalid),
        .m_axis_tready(m_axis_tready),
        .m_axis_tlast(m_axis_tlast),
        .m_bypass_tdata(byp_tdata),
        .m_bypass_tkeep(byp_tkeep),
        .m_bypass_tvalid(byp_tvalid),
        .m_bypass_tready(1'b1),
        .m_bypass_tlast(byp_tlast),
        .m_bypass_tuser(byp_tuser),
        .m_meta_valid(m_meta_valid),
        .m_meta_ready(m_meta_ready),
        .m_meta_dmac(m_meta_dmac),
        .m_meta_smac(),
        .m_meta_ipv6(m_meta_ipv6),
        .m_meta_sip(m_meta_sip),
        .m_meta_dip(m_meta_dip),
        .m_meta_tos(),
        .m_meta_udp_sport(),
        .m_meta_opcode(m_meta_opcode),
        .m_meta_solicited(m_meta_solicited),
        .m_meta_migreq(),
        .m_meta_padcount(m_meta_padcount),
        .m_meta_pkey(m_meta_pkey),
        .m_meta_fecn(),
        .m_meta_becn(),
        .m_meta_dqpn(m_meta_dqpn),
        .m_meta_ackreq(m_meta_ackreq),
        .m_meta_psn(m_meta_psn),
        .m_meta_flags(),
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
        .m_meta_deth_qkey(),
        .m_meta_deth_src_qp(),
        .stat_rx_packets(stat_packets),
        .stat_bypass(s_byp),
        .stat_drop_bad_icrc(s_icrc),
        .stat_drop_truncated(s_trunc),
        .stat_drop_bad_ip_version(s_ipv),
        .stat_drop_bad_ip_header(s_iph),
        .stat_drop_bad_ip_checksum(s_ipc),
        .stat_drop_bad_ip_length(s_ipl),
        .stat_drop_bad_udp_length(s_udpl),
        .stat_drop_unknown_opcode(s_op),
        .stat_drop_bad_transport_version(s_tver),
        .stat_drop_short_headers(s_short),
        .stat_drop_bad_padcount(s_pad),
        .stat_drop_oversize(s_over)
    );
    /* verilator lint_on PINCONNECTEMPTY */

    always @(posedge clk)
        stat_drops <= s_byp + s_icrc + s_trunc + s_ipv + s_iph + s_ipc + s_ipl + s_udpl + s_op +
                      s_tver + s_short + s_pad + s_over;

    /* verilator lint_off UNUSEDSIGNAL */
    wire unused = &{1'b0, byp_tdata, byp_tkeep, byp_tvalid, byp_tlast, byp_tuser};
    /* verilator lint_on UNUSEDSIGNAL */

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXIS_IN("roce_nic_rx in", DATA_WIDTH, DATA_WIDTH/8, 1)
    `NIC_CHECK_AXIS_OUT("roce_nic_rx out", DATA_WIDTH, DATA_WIDTH/8, 0)

endmodule
`default_nettype wire
