// roce_icrc_insert: append the RoCEv2 ICRC to each frame of an AXI-Stream.
//
// In: Ethernet frames without FCS: Ethernet (14) + IPv4 (20, no options) or IPv6 (40) + UDP
// + BTH + extension headers + payload + pad, WITHOUT the ICRC, with any tkeep pattern (null
// bytes and whole null beats anywhere). Out: the same bytes followed by the 4-byte ICRC, least
// significant byte first (nicsim.wire.FrameBuilder's layout), as a packed stream: every beat
// full except the last, whose tkeep is contiguous from bit 0. Frames whose EtherType is
// neither IPv4 (0x0800) nor IPv6 (0x86dd), including frames shorter than 14 bytes, pass
// through packed but otherwise unchanged. A frame of no bytes at all is dropped.
// s_axis_tuser of the input's tlast beat is put on the output's last beat (0 elsewhere).
//
// Pipeline: axis_keep_packer -> crc32_roce_icrc (CRC per beat, 5 + log2(KEEP_WIDTH) stages)
// -> output register, which puts ~CRC after the last byte; when that overflows the beat, the
// rest goes out in one extra beat (the input waits a cycle: the output then carries more bytes
// than the input).
// Throughput: one beat per cycle, no bubble between frames (packed input): cycles per frame =
// ceil((frame bytes + 4) / KEEP_WIDTH). Latency: a frame's last beat is on m_axis
// 7 + log2(KEEP_WIDTH) cycles after its tlast beat was accepted (10 at 64 bits, 13 at 512).
//
// Parameters:
//   DATA_WIDTH  tdata width: 64, 128, 256 or 512
//   KEEP_WIDTH  DATA_WIDTH/8
// Ports:
//   clk, rst    clock, synchronous active-high reset
//   s_axis_*    input frames (tuser: 1 bit, meaningful on the tlast beat)
//   m_axis_*    output frames with ICRC, packed
//   s_axis_tready depends combinationally on m_axis_tready.

`default_nettype none
`include "nic_common.vh"

module roce_icrc_insert #(
    parameter DATA_WIDTH = 64,
    parameter KEEP_WIDTH = DATA_WIDTH/8
) (
    input  wire                  clk,
    input  wire                  rst,

    `NIC_AXIS_SLAVE_PORTS(DATA_WIDTH, KEEP_WIDTH),
    input  wire                  s_axis_tuser,

    `NIC_AXIS_MASTER_PORTS(reg, DATA_WIDTH, KEEP_WIDTH),
    output reg                   m_axis_tuser
);

// Packed stream out of the packer.
wire [DATA_WIDTH-1:0] p_tdata;
wire [KEEP_WIDTH-1:0] p_tkeep;
wire                  p_tvalid, p_tready, p_tlast, p_tuser;

// Registered beats with the CRC over them.
wire [DATA_WIDTH-1:0] a_tdata;
wire [KEEP_WIDTH-1:0] a_tkeep;
wire                  a_tvalid, a_tready, a_tlast, a_tuser, a_ip;
/* verilator lint_off UNUSEDSIGNAL */
wire                  a_bad;      // check mode only
/* verilator lint_on UNUSEDSIGNAL */
wire [31:0]           a_crc;
wire [6:0]            a_cnt;

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
    .CHECK(0)
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

localparam [7:0] KEEP_BYTES = KEEP_WIDTH[7:0];

// ICRC bytes that did not fit in the last beat, sent as one more beat.
reg        spill_valid;
reg [31:0] spill_data;
reg [3:0]  spill_keep;
reg        spill_user;

wire out_free = !m_axis_tvalid || m_axis_tready;
assign a_tready = out_free && !spill_valid;

// The last beat with the ICRC placed right after its a_cnt bytes (lanes past a_cnt are zero).
wire [31:0]              icrc = ~a_crc;
wire [DATA_WIDTH+31:0]   with_icrc = {32'd0, a_tdata} | ({{DATA_WIDTH{1'b0}}, icrc} << {a_cnt, 3'b000});
wire [7:0]               total = {1'b0, a_cnt} + 8'd4;
wire                     overflow = total > KEEP_BYTES;
wire [KEEP_WIDTH+3:0]    total_keep = ~({(KEEP_WIDTH+4){1'b1}} << total);

always @(posedge clk) begin
    if (out_free) begin
        if (spill_valid) begin
            m_axis_tvalid <= 1'b1;
            m_axis_tdata  <= {{(DATA_WIDTH-32){1'b0}}, spill_data};
            m_axis_tkeep  <= {{(KEEP_WIDTH-4){1'b0}}, spill_keep};
            m_axis_tlast  <= 1'b1;
            m_axis_tuser  <= spill_user;
            spill_valid   <= 1'b0;
        end else begin
            m_axis_tvalid <= a_tvalid;
            if (a_tvalid) begin
                if (a_tlast && a_ip) begin
                    m_axis_tdata <= with_icrc[DATA_WIDTH-1:0];
                    m_axis_tkeep <= total_keep[KEEP_WIDTH-1:0];
                    m_axis_tlast <= !overflow;
                    m_axis_tuser <= overflow ? 1'b0 : a_tuser;
                    spill_valid  <= overflow;
                    spill_data   <= with_icrc[DATA_WIDTH +: 32];
                    spill_keep   <= total_keep[KEEP_WIDTH +: 4];
                    spill_user   <= a_tuser;
                end else begin
                    m_axis_tdata <= a_tdata;
                    m_axis_tkeep <= a_tkeep;
                    m_axis_tlast <= a_tlast;
                    m_axis_tuser <= a_tlast & a_tuser;
                end
            end
        end
    end

    if (rst) begin
        m_axis_tvalid <= 1'b0;
        spill_valid   <= 1'b0;
    end
end

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXIS_IN("roce_icrc_insert in", DATA_WIDTH, KEEP_WIDTH, 0)
    `NIC_CHECK_AXIS_OUT("roce_icrc_insert out", DATA_WIDTH, KEEP_WIDTH, 1)

endmodule

`default_nettype wire
