`default_nettype none
`include "nic_common.vh"
// cqe_write: completions -> 32-byte hwif.Cqe records written into CQ rings in host memory
// (AXI4 write master).
//
// Per CQ (direct-mapped: CQ number c < NUM_CQ is slot c) the unit holds the ring base address,
// log2(ring entries) and two 32-bit (unwrapped) counters: the allocation index, which places
// the next CQE (ring base + (index mod size) * 32) and gives its owner bit
// hwif.cqe_owner(index, log_size) = ((index >> log_size) & 1) ^ 1, and the producer index
// cq_pi, advanced when the write of a CQE is acknowledged (B response), i.e. once the CQE is
// in host memory. A CQE is one AXI INCR burst: one beat with a 32-byte strobe when the bus is
// at least 256 bits wide (the CQE is replicated on all 32-byte lanes; the strobe selects its
// lanes), else 32 / (AXI_DATA_WIDTH / 8) full beats; the owner byte is in the last beat.
// Up to OUTSTANDING writes wait for their B response (one AXI ID: responses in order).
// Completions for a CQ >= NUM_CQ or a disabled CQ are accepted and dropped. The unit does not
// check for a full CQ (software's consumer index is not tracked here).
// s_cqe_ready depends combinationally on m_axi_awready / m_axi_wready (ready-to-ready only);
// every valid output is a register.
//
// Requirements: ring base aligned to 32 bytes; log_size in 0..31.
//
// Parameters:
//   AXI_DATA_WIDTH  AXI data width (32..1024, a power of two)
//   AXI_ADDR_WIDTH  AXI address width (16..64)
//   AXI_ID_WIDTH    AXI ID width (AWID is always 0)
//   NUM_CQ          number of completion queues (>= 1)
//   CQN_WIDTH       width of CQ numbers (>= clog2(NUM_CQ))
//   OUTSTANDING     writes awaiting a B response (>= 1)
//
// Ports:
//   clk, rst              clock, synchronous active-high reset (all CQs disabled)
//   cfg_valid             write CQ cfg_cqn's configuration this cycle (always taken); sets
//                         both of its indexes to cfg_index (0 for a new CQ; RESIZE_CQ: the
//                         CQEs it moved to the front of the new ring)
//   cfg_cqn               CQ number
//   cfg_enable            1: enable with the fields below; 0: disable
//   cfg_base              CQ ring physical address
//   cfg_log_size[4:0]     log2(ring entries)
//   cfg_index[31:0]       the CQ's next CQE index (unwrapped: slot and owner bit follow it)
//   hold                  accept no completion (s_cqe_ready low) while high: the command
//                         processor moves a ring (RESIZE_CQ)
//   busy                  CQE writes accepted and not yet acknowledged (B response)
//   s_cqe_valid/ready     completion handshake
//   s_cqe_cqn             CQ to write
//   s_cqe_qpn[31:0], s_cqe_wqe_index[15:0], s_cqe_opcode[7:0], s_cqe_status[7:0],
//   s_cqe_byte_len[31:0], s_cqe_imm_inv[31:0], s_cqe_src_qp[31:0], s_cqe_flags[7:0],
//   s_cqe_vendor_err[7:0] hwif.Cqe fields (owner is computed here)
//   cq_pi[NUM_CQ*32-1:0]  producer index of each CQ (CQ c at bits 32c+31:32c)
//   wr_error              sticky: a B response was not OKAY (cleared by reset)
//   m_axi_aw*, m_axi_w*, m_axi_b*  AXI4 write master
module cqe_write #(
    parameter AXI_DATA_WIDTH = 64,
    parameter AXI_ADDR_WIDTH = 64,
    parameter AXI_ID_WIDTH = 4,
    parameter NUM_CQ = 4,
    parameter CQN_WIDTH = 24,
    parameter OUTSTANDING = 4
) (
    input  wire                          clk,
    input  wire                          rst,

    input  wire                          cfg_valid,
    input  wire [CQN_WIDTH-1:0]          cfg_cqn,
    input  wire                          cfg_enable,
    input  wire [AXI_ADDR_WIDTH-1:0]     cfg_base,
    input  wire [4:0]                    cfg_log_size,
    input  wire [31:0]                   cfg_index,
    input  wire                          hold,
    output wire                          busy,

    input  wire                          s_cqe_valid,
    output wire                          s_cqe_ready,
    input  wire [CQN_WIDTH-1:0]          s_cqe_cqn,
    input  wire [31:0]                   s_cqe_qpn,
    input  wire [15:0]                   s_cqe_wqe_index,
    input  wire [7:0]                    s_cqe_opcode,
    input  wire [7:0]                    s_cqe_status,
    input  wire [31:0]                   s_cqe_byte_len,
    input  wire [31:0]                   s_cqe_imm_inv,
    input  wire [31:0]                   s_cqe_src_qp,
    input  wire [7:0]                    s_cqe_flags,
    input  wire [7:0]                    s_cqe_vendor_err,

    output wire [NUM_CQ*32-1:0]          cq_pi,
    output reg                           wr_error,

    `NIC_AXI_WR_MASTER_PORTS(AXI_ID_WIDTH, AXI_ADDR_WIDTH, AXI_DATA_WIDTH)
);

    `NIC_CLOG2_FUNCTION

    localparam CQE_BYTES = 32;              // hwif.CQE_SIZE
    localparam CQE_W = 8 * CQE_BYTES;
    localparam BEAT_BYTES = AXI_DATA_WIDTH / 8;
    localparam BEAT_LOG = clog2(BEAT_BYTES);
    localparam WIDE = BEAT_BYTES >= CQE_BYTES;
    localparam CQE_BEATS = WIDE ? 1 : CQE_BYTES / BEAT_BYTES;
    localparam BEAT_CNT_W = CQE_BEATS > 1 ? clog2(CQE_BEATS) : 1;
    localparam LANES = WIDE ? BEAT_BYTES / CQE_BYTES : 1;   // CQE positions in a beat
    localparam LANE_W = LANES > 1 ? clog2(LANES) : 1;
    localparam CQ_W = NUM_CQ > 1 ? clog2(NUM_CQ) : 1;
    localparam OS_PTR_W = OUTSTANDING > 1 ? clog2(OUTSTANDING) : 1;
    localparam OS_CNT_W = clog2(OUTSTANDING + 1);
    localparam integer LAST_BEAT_I = CQE_BEATS - 1;
    localparam integer LAST_OS_I = OUTSTANDING - 1;
    localparam integer MAX_OS_I = OUTSTANDING;
    localparam [BEAT_CNT_W-1:0] LAST_BEAT = LAST_BEAT_I[BEAT_CNT_W-1:0];
    localparam [OS_PTR_W-1:0] LAST_OS = LAST_OS_I[OS_PTR_W-1:0];
    localparam [OS_CNT_W-1:0] MAX_OS = MAX_OS_I[OS_CNT_W-1:0];

    // ---------------------------------------------------------------- per-CQ state
    // CQ c's field at [c*width +: width]
    reg [NUM_CQ-1:0]                cq_en;
    reg [NUM_CQ*AXI_ADDR_WIDTH-1:0] cq_base;
    reg [NUM_CQ*5-1:0]              cq_lsize;
    reg [NUM_CQ*32-1:0]             cq_mask;
    reg [NUM_CQ*32-1:0]             cq_alloc;
    reg [NUM_CQ*32-1:0]             cq_prod;

    wire cfg_hit = cfg_valid && {{(32-CQN_WIDTH){1'b0}}, cfg_cqn} < NUM_CQ;
    wire [CQ_W-1:0] cfg_c = cfg_cqn[CQ_W-1:0];
    wire [32:0] cfg_mask = (33'd1 << cfg_log_size) - 33'd1;

    assign cq_pi = cq_prod;

    // ---------------------------------------------------------------- accept
    reg                      aw_valid;
    reg [AXI_ADDR_WIDTH-1:0] aw_addr;
    reg                      w_valid;
    reg [BEAT_CNT_W-1:0]     w_beat;
    reg [CQE_W-1:0]          w_cqe;
    reg [LANE_W-1:0]         w_lane;
    reg [OS_CNT_W-1:0]       outstanding;

    wire w_last = w_beat == LAST_BEAT;
    wire aw_free = !aw_valid || m_axi_awready;
    wire w_free = !w_valid || (m_axi_wready && w_last);
    assign s_cqe_ready = aw_free && w_free && outstanding < MAX_OS && !hold;
    assign busy = outstanding != {OS_CNT_W{1'b0}};   // counts from the accept to the B
    wire accept = s_cqe_valid && s_cqe_ready;

    wire in_hit = {{(32-CQN_WIDTH){1'b0}}, s_cqe_cqn} < NUM_CQ;
    wire [CQ_W-1:0] in_c = s_cqe_cqn[CQ_W-1:0];
    wire in_en = in_hit && cq_en[in_c];
    wire write = accept && in_en;
    wire [31:0] in_idx = cq_alloc[32*in_c +: 32];
    wire [31:0] in_slot = in_idx & cq_mask[32*in_c +: 32];
    wire in_owner = !in_idx[cq_lsize[5*in_c +: 5]];
    wire [AXI_ADDR_WIDTH-1:0] in_addr = cq_base[AXI_ADDR_WIDTH*in_c +: AXI_ADDR_WIDTH] +
                                        ({{(AXI_ADDR_WIDTH-32){1'b0}}, in_slot} << 5);
    // hwif.Cqe layout, little-endian
    wire [CQE_W-1:0] in_cqe = {7'd0, in_owner, 72'd0, s_cqe_vendor_err, s_cqe_flags,
                               s_cqe_src_qp, s_cqe_imm_inv, s_cqe_byte_len, s_cqe_status,
                               s_cqe_opcode, s_cqe_wqe_index, s_cqe_qpn};

    // ---------------------------------------------------------------- B tracking FIFO
    reg [CQ_W-1:0]     b_mem [0:OUTSTANDING-1];
    reg [OS_PTR_W-1:0] b_wr;
    reg [OS_PTR_W-1:0] b_rd;
    wire               b_hs = m_axi_bvalid;   // bready is always 1
    wire [CQ_W-1:0]    b_c = b_mem[b_rd];

    always @(posedge clk) begin
        if (write) begin
            aw_addr <= in_addr;
            w_cqe <= in_cqe;
            b_mem[b_wr] <= in_c;
        end

        if (rst) begin
            aw_valid <= 1'b0;
            w_valid <= 1'b0;
            w_beat <= {BEAT_CNT_W{1'b0}};
            outstanding <= {OS_CNT_W{1'b0}};
            b_wr <= {OS_PTR_W{1'b0}};
            b_rd <= {OS_PTR_W{1'b0}};
            wr_error <= 1'b0;
        end else begin
            if (write)
                aw_valid <= 1'b1;
            else if (m_axi_awready)
                aw_valid <= 1'b0;

            if (write) begin
                w_valid <= 1'b1;
                w_beat <= {BEAT_CNT_W{1'b0}};
            end else if (w_valid && m_axi_wready) begin
                if (w_last)
                    w_valid <= 1'b0;
                else
                    w_beat <= w_beat + 1'b1;
            end

            if (write)
                b_wr <= (b_wr == LAST_OS) ? {OS_PTR_W{1'b0}} : b_wr + 1'b1;
            if (b_hs)
                b_rd <= (b_rd == LAST_OS) ? {OS_PTR_W{1'b0}} : b_rd + 1'b1;
            if (write && !b_hs)
                outstanding <= outstanding + 1'b1;
            else if (!write && b_hs)
                outstanding <= outstanding - 1'b1;
            if (b_hs && m_axi_bresp != 2'b00)
                wr_error <= 1'b1;
        end
    end

    // per-CQ registers: config has priority
    always @(posedge clk) begin : cq_regs
        integer k;
        for (k = 0; k < NUM_CQ; k = k + 1) begin
            if (rst) begin
                cq_en[k] <= 1'b0;
                cq_alloc[32*k +: 32] <= 32'd0;
                cq_prod[32*k +: 32] <= 32'd0;
            end else if (cfg_hit && cfg_c == k[CQ_W-1:0]) begin
                cq_en[k] <= cfg_enable;
                cq_base[AXI_ADDR_WIDTH*k +: AXI_ADDR_WIDTH] <= cfg_base;
                cq_lsize[5*k +: 5] <= cfg_log_size;
                cq_mask[32*k +: 32] <= cfg_mask[31:0];
                cq_alloc[32*k +: 32] <= cfg_index;
                cq_prod[32*k +: 32] <= cfg_index;
            end else begin
                if (write && in_c == k[CQ_W-1:0])
                    cq_alloc[32*k +: 32] <= in_idx + 32'd1;
                if (b_hs && b_c == k[CQ_W-1:0])
                    cq_prod[32*k +: 32] <= cq_prod[32*k +: 32] + 32'd1;
            end
        end
    end

    // ---------------------------------------------------------------- W data
    generate
        if (WIDE) begin : g_wide
            // the CQE on every 32-byte lane, strobe on the lane of its address
            always @(posedge clk) begin
                if (write)
                    w_lane <= LANES > 1 ? in_addr[5 +: LANE_W] : {LANE_W{1'b0}};
            end
            assign m_axi_wdata = {LANES{w_cqe}};
            assign m_axi_wstrb = {{(BEAT_BYTES-CQE_BYTES){1'b0}}, {CQE_BYTES{1'b1}}}
                                 << (w_lane * CQE_BYTES);
        end else begin : g_narrow
            always @(posedge clk) begin
                w_lane <= {LANE_W{1'b0}};
            end
            assign m_axi_wdata = w_cqe[w_beat * AXI_DATA_WIDTH +: AXI_DATA_WIDTH];
            assign m_axi_wstrb = {BEAT_BYTES{1'b1}};
        end
    endgenerate

    assign m_axi_awid = {AXI_ID_WIDTH{1'b0}};
    assign m_axi_awaddr = aw_addr;
    assign m_axi_awlen = LAST_BEAT_I[7:0];
    assign m_axi_awsize = BEAT_LOG[2:0];
    assign m_axi_awburst = 2'b01;   // INCR
    assign m_axi_awlock = 1'b0;
    assign m_axi_awcache = 4'b0011; // normal non-cacheable bufferable
    assign m_axi_awprot = 3'b010;   // unprivileged, non-secure, data
    assign m_axi_awvalid = aw_valid;
    assign m_axi_wlast = w_last;
    assign m_axi_wvalid = w_valid;
    assign m_axi_bready = 1'b1;

    /* verilator lint_off UNUSEDSIGNAL */
    wire unused = &{1'b0, m_axi_bid, cfg_mask[32], w_lane};
    /* verilator lint_on UNUSEDSIGNAL */

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXI_WR_MASTER("cqe_write DMA", AXI_ID_WIDTH, AXI_ADDR_WIDTH, AXI_DATA_WIDTH)

endmodule
`default_nettype wire
