// roce_icrc_check: verify the RoCEv2 ICRC of each frame of an AXI-Stream.
//
// In: Ethernet frames without FCS, each ending in (or followed by Ethernet padding after) a
// RoCEv2 packet with its ICRC: Ethernet (14) + IPv4 (20, no options) or IPv6 (40) + UDP + BTH
// + extension headers + payload + pad + ICRC, with any tkeep pattern (null bytes and whole null
// beats anywhere). Out: the same bytes (ICRC kept) as a packed stream: every beat full except
// the last, whose tkeep is contiguous from bit 0. A frame of no bytes at all is dropped.
// m_axis_tuser on the last beat = s_axis_tuser of the input's tlast beat, OR'ed, for IPv4 and
// IPv6 frames (by EtherType), with "ICRC wrong": the ICRC over bytes 14..end (end from the IP
// length field, so trailing Ethernet padding is ignored) does not match, or the frame cannot
// carry a right one (IPv4 header byte 14 is not 0x45, IPv6 version is not 6, IP length below
// the smallest RoCEv2 packet, or the frame shorter than its IP length). Frames with any other
// EtherType pass with tuser = s_axis_tuser. stat_bad_icrc pulses for one cycle per frame found
// wrong, in the cycle its last beat appears on m_axis.
//
// Pipeline: axis_keep_packer -> crc32_roce_icrc (CRC per beat, over the received ICRC too;
// 5 + log2(KEEP_WIDTH) stages) -> output register, which compares the CRC register with the
// CRC-32 residue 32'hdebb20e3.
// Throughput: one beat per cycle, no bubble between frames (packed input): cycles per frame =
// ceil(frame bytes / KEEP_WIDTH). Latency: a frame's last beat is on m_axis
// 7 + log2(KEEP_WIDTH) cycles after its tlast beat was accepted (10 at 64 bits, 13 at 512).
//
// Parameters:
//   DATA_WIDTH     tdata width: 64, 128, 256 or 512
//   KEEP_WIDTH     DATA_WIDTH/8
// Ports:
//   clk, rst       clock, synchronous active-high reset
//   s_axis_*       input frames (tuser: 1 bit, meaningful on the tlast beat)
//   m_axis_*       output frames, packed; tuser on the last beat as above
//   stat_bad_icrc  one-cycle pulse per frame with a wrong ICRC
//   s_axis_tready depends combinationally on m_axis_tready.

`default_nettype none
`include "nic_common.vh"

module roce_icrc_check #(
    parameter DATA_WIDTH = 64,
    parameter KEEP_WIDTH = DATA_WIDTH/8
) (
    input  wire                  clk,
    input  wire                  rst,

    `NIC_AXIS_SLAVE_PORTS(DATA_WIDTH, KEEP_WIDTH),
    input  wire                  s_axis_tuser,

    `NIC_AXIS_MASTER_PORTS(reg, DATA_WIDTH, KEEP_WIDTH),
    output reg                   m_axis_tuser,

    output reg                   stat_bad_icrc
);

// CRC-32 register (zlib's, before the final inversion) over a message followed by its own
// CRC, least significant byte first.
localparam [31:0] CRC32_RESIDUE = 32'hdebb20e3;

wire [DATA_WIDTH-1:0] p_tdata;
wire [KEEP_WIDTH-1:0] p_tkeep;
wire                  p_tvalid, p_tready, p_tlast, p_tuser;

wire [DATA_WIDTH-1:0] a_tdata;
wire [KEEP_WIDTH-1:0] a_tkeep;
wire                  a_tvalid, a_tready, a_tlast, a_tuser, a_ip, a_bad;
wire [31:0]           a_crc;
/* verilator lint_off UNUSEDSIGNAL */
wire [6:0]            a_cnt;      // used by insert only
/* verilator lint_on UNUSEDSIGNAL */

axis_keep_packer #(
    .DATA_WIDTH(DATA_WIDTH),
    .KEEP_WIDTH(KEEP_WIDTH),
    .USER_WIDTH(1)
) u_pack (
    .clk(clk),
    .rst(rst),
    .s_axis_tdata(s_axis_tdata),
    .s_axis_tkeep(s_axis_tkeep),
    .s_axis_tvalid(s_axis_tvalid),
    .s_axis_tready(s_axis_tready),
    .s_axis_tlast(s_axis_tlast),
    .s_axis_tuser(s_axis_tuser),
    .m_axis_tdata(p_tdata),
    .m_axis_tkeep(p_tkeep),
    .m_axis_tvalid(p_tvalid),
    .m_axis_tready(p_tready),
    .m_axis_tlast(p_tlast),
    .m_axis_tuser(p_tuser)
);

crc32_roce_icrc #(
    .DATA_WIDTH(DATA_WIDTH),
    .KEEP_WIDTH(KEEP_WIDTH),
    .CHECK(1)
) u_crc (
    .clk(clk),
    .rst(rst),
    .s_axis_tdata(p_tdata),
    .s_axis_tkeep(p_tkeep),
    .s_axis_tvalid(p_tvalid),
    .s_axis_tready(p_tready),
    .s_axis_tlast(p_tlast),
    .s_axis_tuser(p_tuser),
    .m_axis_tdata(a_tdata),
    .m_axis_tkeep(a_tkeep),
    .m_axis_tvalid(a_tvalid),
    .m_axis_tready(a_tready),
    .m_axis_tlast(a_tlast),
    .m_axis_tuser(a_tuser),
    .m_ip(a_ip),
    .m_bad(a_bad),
    .m_crc(a_crc),
    .m_cnt(a_cnt)
);

wire out_free = !m_axis_tvalid || m_axis_tready;
assign a_tready = out_free;

wire icrc_wrong = a_tlast && a_ip && (a_bad || a_crc != CRC32_RESIDUE);

always @(posedge clk) begin
    stat_bad_icrc <= 1'b0;
    if (out_free) begin
        m_axis_tvalid <= a_tvalid;
        if (a_tvalid) begin
            m_axis_tdata  <= a_tdata;
            m_axis_tkeep  <= a_tkeep;
            m_axis_tlast  <= a_tlast;
            m_axis_tuser  <= a_tlast && (a_tuser || icrc_wrong);
            stat_bad_icrc <= icrc_wrong;
        end
    end

    if (rst) begin
        m_axis_tvalid <= 1'b0;
        stat_bad_icrc <= 1'b0;
    end
end

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXIS_IN("roce_icrc_check in", DATA_WIDTH, KEEP_WIDTH, 0)
    `NIC_CHECK_AXIS_OUT("roce_icrc_check out", DATA_WIDTH, KEEP_WIDTH, 1)

endmodule

`default_nettype wire
