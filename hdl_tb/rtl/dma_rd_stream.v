`default_nettype none
`include "nic_common.vh"
// dma_rd_stream: host memory chunks -> AXI4 INCR read bursts -> a packed AXI-Stream of their
// bytes, one packet per run of chunks that ends with `last`. The payload read path of the
// requester (roce_req) and of the responder's READ responses (roce_resp).
//
// Each chunk (physical address, bytes, last of its packet) must lie inside one burst window
// (BURST bytes, aligned: inside a page and at most 256 beats); it is read with one burst. A
// burst is issued only when the payload FIFO has room for all its beats besides those
// already requested, so R data is always taken when it comes (the read channel is shared
// with other units and must never stall). R beats get tkeep for the chunk's bytes and tlast
// at the end of each packet; axis_keep_packer packs them. tuser on a packet's last beat marks
// a read error (RRESP not OKAY) in the packet.
//
// Parameters:
//   DATA_WIDTH   AXI and stream width (64..1024, a power of two)
//   ADDR_WIDTH   physical address width
//   PAY_DEPTH    payload FIFO depth in beats (power of two, >= one burst)
//   META_DEPTH   bursts in flight (chunk records; power of two)
//
// Ports:
//   clk, rst              clock, synchronous active-high reset
//   s_ch_*                chunks (valid/ready; s_ch_ready does not depend on s_ch_valid)
//   m_axi_ar*, m_axi_r*   AXI4 read master (ID 0)
//   m_axis_*              the packed byte stream
//   busy                  a burst is requested whose data has not all arrived
module dma_rd_stream #(
    parameter DATA_WIDTH = 64,
    parameter ADDR_WIDTH = 64,
    parameter PAY_DEPTH = 1024,
    parameter META_DEPTH = 16
) (
    input  wire                          clk,
    input  wire                          rst,

    input  wire                          s_ch_valid,
    output wire                          s_ch_ready,
    input  wire [ADDR_WIDTH-1:0]         s_ch_addr,
    input  wire [12:0]                   s_ch_len,
    input  wire                          s_ch_last,

    output reg  [ADDR_WIDTH-1:0]         m_axi_araddr,
    output reg  [7:0]                    m_axi_arlen,
    output wire [2:0]                    m_axi_arsize,
    output wire [1:0]                    m_axi_arburst,
    output reg                           m_axi_arvalid,
    input  wire                          m_axi_arready,
    input  wire [DATA_WIDTH-1:0]         m_axi_rdata,
    input  wire [1:0]                    m_axi_rresp,
    input  wire                          m_axi_rlast,
    input  wire                          m_axi_rvalid,
    output wire                          m_axi_rready,

    `NIC_AXIS_MASTER_PORTS(wire, DATA_WIDTH, DATA_WIDTH/8),
    output wire                          m_axis_tuser,

    output wire                          busy
);

    `NIC_CLOG2_FUNCTION

    localparam KW = DATA_WIDTH / 8;
    localparam KW_LOG = clog2(KW);
    localparam integer KW_M1 = KW - 1;
    localparam PAY_AW = clog2(PAY_DEPTH);
    localparam RES_W = PAY_AW + 2;
    localparam integer PAY_DEPTH_I = PAY_DEPTH;
    localparam [RES_W-1:0] PAY_DEPTH_R = PAY_DEPTH_I[RES_W-1:0];
    localparam META_W = KW_LOG + 13 + 1;                 // {last of packet, bytes, offset}

    wire [KW_LOG-1:0] ch_off = s_ch_addr[KW_LOG-1:0];
    wire [13:0]    ch_span = {1'b0, s_ch_len} + {{(14-KW_LOG){1'b0}}, ch_off};
    wire [13:0]    ch_beats = (ch_span + KW_M1[13:0]) >> KW_LOG;

    reg  [RES_W-1:0] reserved;   // payload FIFO beats requested and not yet popped
    wire             meta_ready;
    wire ar_free = !m_axi_arvalid || m_axi_arready;
    assign s_ch_ready = ar_free && meta_ready && reserved + ch_beats[RES_W-1:0] <= PAY_DEPTH_R;
    wire ch_go = s_ch_valid && s_ch_ready;

    always @(posedge clk) begin
        if (ch_go) begin
            m_axi_araddr <= {s_ch_addr[ADDR_WIDTH-1:KW_LOG], {KW_LOG{1'b0}}};
            m_axi_arlen <= ch_beats[7:0] - 8'd1;
        end
        if (rst) begin
            m_axi_arvalid <= 1'b0;
        end else if (ch_go) begin
            m_axi_arvalid <= 1'b1;
        end else if (m_axi_arready) begin
            m_axi_arvalid <= 1'b0;
        end
    end
    assign m_axi_arsize = KW_LOG[2:0];
    assign m_axi_arburst = 2'b01;

    // chunk records of the bursts in flight
    wire               mh_valid;
    wire [META_W-1:0]  mh;
    wire [15:0]        meta_count;
    wire [KW_LOG-1:0]  mh_off = mh[KW_LOG-1:0];
    wire [12:0]        mh_len = mh[KW_LOG +: 13];
    wire               mh_last = mh[META_W-1];

    wire               pf_in_ready;
    assign m_axi_rready = mh_valid && pf_in_ready;
    wire r_hs = m_axi_rvalid && m_axi_rready;
    assign busy = mh_valid || m_axi_arvalid;

    fifo_fwft #(
        .WIDTH(META_W),
        .DEPTH(META_DEPTH)
    ) u_meta (
        .clk(clk),
        .rst(rst),
        .s_data({s_ch_last, s_ch_len, ch_off}),
        .s_valid(ch_go),
        .s_ready(meta_ready),
        .m_data(mh),
        .m_valid(mh_valid),
        .m_ready(r_hs && m_axi_rlast),
        .count(meta_count)
    );

    // the bytes of each R beat that belong to the chunk
    reg         rb_mid;                 // past the burst's first beat
    reg  [13:0] rb_rem;                 // bytes from this beat's start to the chunk's end
    wire [13:0] cur_rem = rb_mid ? rb_rem : {1'b0, mh_len} + {{(14-KW_LOG){1'b0}}, mh_off};
    wire [KW_LOG:0] lo = rb_mid ? {(KW_LOG+1){1'b0}} : {1'b0, mh_off};
    wire [KW_LOG:0] hi = cur_rem >= KW[13:0] ? KW[KW_LOG:0] : cur_rem[KW_LOG:0];
    wire [KW-1:0] r_keep = ~({KW{1'b1}} << hi) & ({KW{1'b1}} << lo);

    always @(posedge clk) begin
        if (r_hs) begin
            rb_mid <= !m_axi_rlast;
            rb_rem <= cur_rem - KW[13:0];
        end
        if (rst)
            rb_mid <= 1'b0;
    end

    // payload FIFO {tuser, tlast, tkeep, tdata} -> packer
    localparam PF_W = DATA_WIDTH + KW + 2;
    wire [PF_W-1:0] pf_out;
    wire            pf_valid;
    wire            pf_ready;
    wire [15:0]     pf_count;
    wire            pf_pop = pf_valid && pf_ready;

    fifo_fwft #(
        .WIDTH(PF_W),
        .DEPTH(PAY_DEPTH)
    ) u_pay (
        .clk(clk),
        .rst(rst),
        .s_data({m_axi_rresp != 2'b00, mh_last && m_axi_rlast, r_keep, m_axi_rdata}),
        .s_valid(r_hs),
        .s_ready(pf_in_ready),
        .m_data(pf_out),
        .m_valid(pf_valid),
        .m_ready(pf_ready),
        .count(pf_count)
    );

    always @(posedge clk) begin
        if (rst)
            reserved <= {RES_W{1'b0}};
        else
            reserved <= reserved + (ch_go ? ch_beats[RES_W-1:0] : {RES_W{1'b0}})
                        - {{(RES_W-1){1'b0}}, pf_pop};
    end

    axis_keep_packer #(
        .DATA_WIDTH(DATA_WIDTH),
        .KEEP_WIDTH(KW),
        .USER_WIDTH(1)
    ) u_pack (
        .clk(clk),
        .rst(rst),
        .s_axis_tdata(pf_out[DATA_WIDTH-1:0]),
        .s_axis_tkeep(pf_out[DATA_WIDTH +: KW]),
        .s_axis_tvalid(pf_valid),
        .s_axis_tready(pf_ready),
        .s_axis_tlast(pf_out[DATA_WIDTH + KW]),
        .s_axis_tuser(pf_out[DATA_WIDTH + KW + 1]),
        .m_axis_tdata(m_axis_tdata),
        .m_axis_tkeep(m_axis_tkeep),
        .m_axis_tvalid(m_axis_tvalid),
        .m_axis_tready(m_axis_tready),
        .m_axis_tlast(m_axis_tlast),
        .m_axis_tuser(m_axis_tuser)
    );

    /* verilator lint_off UNUSEDSIGNAL */
    // (a chunk lies inside one burst window: its beats fit arlen + 1 <= 256, the span's top
    // bits are zero)
    wire unused = &{1'b0, meta_count, pf_count, ch_beats};
    /* verilator lint_on UNUSEDSIGNAL */

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXIS_OUT("dma_rd_stream out", DATA_WIDTH, DATA_WIDTH/8, 0)

endmodule
`default_nettype wire
