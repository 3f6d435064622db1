`default_nettype none
`include "nic_common.vh"
// wqe_fetch: send-queue doorbells -> WQE reads from host memory (AXI4 read master) -> decoded
// send WQEs (hwif.SendWqeCtrl + hwif.Sge list).
//
// Per QP (direct-mapped: QP number q < NUM_QP is slot q) the unit holds the SQ ring's base
// address, log2(ring entries), log2(stride) (hwif.send_wqe_stride), a producer index written by
// doorbells and a fetch (consumer) index. Whenever fetch index != producer index on an enabled
// QP, the unit reads the WQE slot (ring base + (index mod size) * stride) with one INCR burst of
// min(stride, 48 + 16 * MAX_SGE) bytes rounded up to whole beats, and advances the fetch index
// (16 bits, wrapping like hwif.WQE_INDEX_MASK). QPs with work are served round-robin; up to
// OUTSTANDING bursts are in flight (one AXI ID: data returns in order).
// Read data is always accepted: R beats go into a beat FIFO (fifo_fwft) with room for
// OUTSTANDING WQEs, and a burst is issued only when the FIFO has room for all of its beats
// besides those already requested. So a consumer that stops taking WQEs never stalls the
// shared R channel (on an in-order interconnect that would hold up other units' reads behind
// this unit's data: the requester's payload reads, which must finish before it takes the next
// WQE).
// The fetched WQE is presented on the m_wqe_* valid/ready output: the hwif.SendWqeCtrl fields
// (bytes 0..47 of the slot, little-endian) and MAX_SGE hwif.Sge entries (bytes 48 + 16 j);
// entries j >= num_sge, and entries that lie beyond the fetched bytes, read as zero. Inline
// data is not returned here (only the first 16 * MAX_SGE bytes after the control segment are
// read). A WQE with num_sge > MAX_SGE is passed on with its num_sge; the consumer must reject it.
//
// Requirements: ring base aligned to the stride (so a slot never crosses a 4 KiB boundary);
// log_stride in 6..12; log_size in 0..16; software keeps pi - ci <= ring size.
// Doorbells and config writes for q >= NUM_QP, and doorbells for a disabled QP, are ignored.
// m_axi_rready depends combinationally on m_wqe_ready (ready-to-ready only); every valid
// output is a register.
//
// Parameters:
//   AXI_DATA_WIDTH  AXI data width (64..1024, a power of two)
//   AXI_ADDR_WIDTH  AXI address width (16..64)
//   AXI_ID_WIDTH    AXI ID width (ARID is always 0)
//   NUM_QP          number of send queues (>= 1)
//   QPN_WIDTH       width of QP numbers (>= clog2(NUM_QP))
//   MAX_SGE         SGE entries decoded per WQE (>= 1)
//   OUTSTANDING     read bursts in flight (>= 1); the beat FIFO holds this many WQEs
//
// Ports:
//   clk, rst            clock, synchronous active-high reset (all QPs disabled)
//   cfg_valid           write QP cfg_qpn's configuration this cycle (no ready: always taken)
//   cfg_qpn             QP number
//   cfg_enable          1: enable with the fields below; 0: disable the QP
//   cfg_base            SQ ring physical address
//   cfg_log_size[4:0]   log2(ring entries)
//   cfg_log_stride[3:0] log2(bytes per WQE slot)
//   cfg_index[15:0]     initial producer and fetch index (0 for a new QP)
//   db_valid            SQ doorbell: hwif UarReg.SQ_DB value = (db_qpn << 32) | db_pi
//   db_qpn, db_pi[15:0] QP number and new producer index
//   rw_valid, rw_qpn, rw_index   go back: fetch QP rw_qpn's SQ again from rw_index (the
//                       requester's go-back-N re-reads the WQEs it resends; WQEs already
//                       fetched or in flight still come out, the consumer drops them)
//   sq_ci[NUM_QP*16-1:0] fetch index of each QP (QP q at bits 16q+15:16q)
//   m_axi_ar*, m_axi_r* AXI4 read master (burst INCR, full-width beats)
//   m_wqe_valid/ready   decoded WQE handshake
//   m_wqe_qpn, m_wqe_index[15:0]   QP and the WQE's (unwrapped 16-bit) index
//   m_wqe_opcode, _flags, _num_sge[7:0], _imm_inv[31:0], _remote_addr[63:0], _rkey[31:0],
//   _inline_len[31:0], _compare_add[63:0], _swap[63:0], _dest_qpn[31:0], _qkey[31:0]
//                       hwif.SendWqeCtrl fields
//   m_wqe_sge_addr[MAX_SGE*64-1:0], m_wqe_sge_len[MAX_SGE*32-1:0],
//   m_wqe_sge_lkey[MAX_SGE*32-1:0]  SGE j at bits 64j / 32j upwards
//   m_wqe_err           an AXI read response of this WQE was not OKAY (fields unreliable)
module wqe_fetch #(
    parameter AXI_DATA_WIDTH = 64,
    parameter AXI_ADDR_WIDTH = 64,
    parameter AXI_ID_WIDTH = 4,
    parameter NUM_QP = 4,
    parameter QPN_WIDTH = 24,
    parameter MAX_SGE = 4,
    parameter OUTSTANDING = 4
) (
    input  wire                          clk,
    input  wire                          rst,

    input  wire                          cfg_valid,
    input  wire [QPN_WIDTH-1:0]          cfg_qpn,
    input  wire                          cfg_enable,
    input  wire [AXI_ADDR_WIDTH-1:0]     cfg_base,
    input  wire [4:0]                    cfg_log_size,
    input  wire [3:0]                    cfg_log_stride,
    input  wire [15:0]                   cfg_index,

    input  wire                          db_valid,
    input  wire [QPN_WIDTH-1:0]          db_qpn,
    input  wire [15:0]                   db_pi,

    input  wire                          rw_valid,
    input  wire [QPN_WIDTH-1:0]          rw_qpn,
    input  wire [15:0]                   rw_index,

    output wire [NUM_QP*16-1:0]          sq_ci,

    `NIC_AXI_RD_MASTER_PORTS(AXI_ID_WIDTH, AXI_ADDR_WIDTH, AXI_DATA_WIDTH),

    output wire                          m_wqe_valid,
    input  wire                          m_wqe_ready,
    output wire [QPN_WIDTH-1:0]          m_wqe_qpn,
    output wire [15:0]                   m_wqe_index,
    output wire [7:0]                    m_wqe_opcode,
    output wire [7:0]                    m_wqe_flags,
    output wire [7:0]                    m_wqe_num_sge,
    output wire [31:0]                   m_wqe_imm_inv,
    output wire [63:0]                   m_wqe_remote_addr,
    output wire [31:0]                   m_wqe_rkey,
    output wire [31:0]                   m_wqe_inline_len,
    output wire [63:0]                   m_wqe_compare_add,
    output wire [63:0]                   m_wqe_swap,
    output wire [31:0]                   m_wqe_dest_qpn,
    output wire [31:0]                   m_wqe_qkey,
    output wire [MAX_SGE*64-1:0]         m_wqe_sge_addr,
    output wire [MAX_SGE*32-1:0]         m_wqe_sge_len,
    output wire [MAX_SGE*32-1:0]         m_wqe_sge_lkey,
    output wire                          m_wqe_err
);

    `NIC_CLOG2_FUNCTION

    localparam BEAT_BYTES = AXI_DATA_WIDTH / 8;
    localparam BEAT_LOG = clog2(BEAT_BYTES);
    localparam CTRL_BYTES = 48;             // hwif.SEND_WQE_CTRL_SIZE
    localparam SGE_BYTES = 16;              // hwif.SGE_SIZE
    localparam FETCH_BYTES = CTRL_BYTES + SGE_BYTES * MAX_SGE;
    localparam FETCH_BEATS = (FETCH_BYTES + BEAT_BYTES - 1) / BEAT_BYTES;
    localparam BUF_W = FETCH_BEATS * AXI_DATA_WIDTH;
    localparam BEAT_CNT_W = clog2(FETCH_BEATS + 1);
    localparam QP_W = NUM_QP > 1 ? clog2(NUM_QP) : 1;
    localparam OS_CNT_W = clog2(OUTSTANDING + 1);
    localparam META_W = QP_W + 16;
    localparam integer LAST_QP_I = NUM_QP - 1;
    localparam integer MAX_OS_I = OUTSTANDING;
    localparam [QP_W-1:0] LAST_QP = LAST_QP_I[QP_W-1:0];
    localparam [OS_CNT_W-1:0] MAX_OS = MAX_OS_I[OS_CNT_W-1:0];
    // beat FIFO: OUTSTANDING WQEs' worth of beats, a power of two
    localparam FIFO_DEPTH = 1 << clog2(OUTSTANDING * FETCH_BEATS < 2 ? 2 :
                                       OUTSTANDING * FETCH_BEATS);
    localparam RES_W = clog2(FIFO_DEPTH + 1) + 1 > 9 ? clog2(FIFO_DEPTH + 1) + 1 : 9;
    localparam integer FIFO_DEPTH_I = FIFO_DEPTH;
    localparam [RES_W-1:0] FIFO_DEPTH_R = FIFO_DEPTH_I[RES_W-1:0];
    // (QP, index) of every WQE requested and not yet assembled: at most one per FIFO beat
    localparam OS_PTR_W = clog2(FIFO_DEPTH);

    // burst length (arlen) of a slot of 2**log_stride bytes
    function [7:0] slot_arlen;
        input [3:0] log_stride;
        integer ls;
        integer beats;
        begin
            ls = {28'd0, log_stride};
            if (ls <= BEAT_LOG)
                beats = 1;
            else
                beats = 1 << (ls - BEAT_LOG);
            if (beats > FETCH_BEATS)
                beats = FETCH_BEATS;
            beats = beats - 1;
            slot_arlen = beats[7:0];
        end
    endfunction

    // ---------------------------------------------------------------- per-QP state
    // QP q's field at [q*width +: width]
    reg [NUM_QP-1:0]                qp_en;
    reg [NUM_QP*AXI_ADDR_WIDTH-1:0] qp_base;
    reg [NUM_QP*16-1:0]             qp_mask;
    reg [NUM_QP*4-1:0]              qp_lstride;
    reg [NUM_QP*8-1:0]              qp_arlen;
    reg [NUM_QP*16-1:0]             qp_pi;
    reg [NUM_QP*16-1:0]             qp_ci;
    wire [NUM_QP-1:0]               qp_pending;

    wire cfg_hit = cfg_valid && {{(32-QPN_WIDTH){1'b0}}, cfg_qpn} < NUM_QP;
    wire db_hit = db_valid && {{(32-QPN_WIDTH){1'b0}}, db_qpn} < NUM_QP;
    wire [QP_W-1:0] cfg_q = cfg_qpn[QP_W-1:0];
    wire [QP_W-1:0] db_q = db_qpn[QP_W-1:0];
    wire rw_hit = rw_valid && {{(32-QPN_WIDTH){1'b0}}, rw_qpn} < NUM_QP;
    wire [QP_W-1:0] rw_q = rw_qpn[QP_W-1:0];
    wire [16:0] cfg_mask = (17'd1 << cfg_log_size) - 17'd1;

    genvar g;
    generate
        for (g = 0; g < NUM_QP; g = g + 1) begin : g_qp
            assign qp_pending[g] = qp_en[g] && qp_ci[16*g +: 16] != qp_pi[16*g +: 16];
        end
    endgenerate
    assign sq_ci = qp_ci;

    // ---------------------------------------------------------------- scheduler / AR
    reg                      ar_valid;
    reg [AXI_ADDR_WIDTH-1:0] ar_addr;
    reg [7:0]                ar_len;
    reg [QP_W-1:0]           rr_ptr;
    reg [OS_CNT_W-1:0]       outstanding;

    reg                      sel_found;
    reg [QP_W-1:0]           sel_q;
    integer                  i;
    integer                  q;
    always @* begin
        sel_found = 1'b0;
        sel_q = {QP_W{1'b0}};
        for (i = 0; i < NUM_QP; i = i + 1) begin
            q = {{(32-QP_W){1'b0}}, rr_ptr} + i;
            if (q >= NUM_QP)
                q = q - NUM_QP;
            if (!sel_found && qp_pending[q]) begin
                sel_found = 1'b1;
                sel_q = q[QP_W-1:0];
            end
        end
    end

    // beats requested and not yet taken out of the beat FIFO
    reg  [RES_W-1:0]         reserved;
    wire [RES_W-1:0]         sel_beats = {{(RES_W-8){1'b0}}, qp_arlen[8*sel_q +: 8]} + 1'b1;
    wire ar_free = !ar_valid || m_axi_arready;
    wire issue = ar_free && sel_found && outstanding < MAX_OS &&
                 reserved + sel_beats <= FIFO_DEPTH_R;
    wire [15:0] sel_ci = qp_ci[16*sel_q +: 16];
    wire [15:0] sel_slot = sel_ci & qp_mask[16*sel_q +: 16];
    wire [AXI_ADDR_WIDTH-1:0] sel_off = {{(AXI_ADDR_WIDTH-16){1'b0}}, sel_slot}
                                        << qp_lstride[4*sel_q +: 4];
    wire [QP_W-1:0] sel_next = (sel_q == LAST_QP) ? {QP_W{1'b0}} : sel_q + 1'b1;

    // ---------------------------------------------------------------- in-flight FIFO
    reg [META_W-1:0]   meta_mem [0:FIFO_DEPTH-1];
    reg [OS_PTR_W-1:0] meta_wr;
    reg [OS_PTR_W-1:0] meta_rd;

    // ---------------------------------------------------------------- R: assembly buffer
    reg                  asm_full;
    reg [BUF_W-1:0]      asm_buf;
    reg [BEAT_CNT_W-1:0] asm_beat;
    reg                  asm_err;
    reg [META_W-1:0]     asm_meta;

    reg                  out_valid;
    reg [BUF_W-1:0]      out_buf;
    reg                  out_err;
    reg [META_W-1:0]     out_meta;

    // R beats -> beat FIFO {rresp error, rlast, rdata}
    wire                      out_free = !out_valid || m_wqe_ready;
    wire                      f_ready = !asm_full || out_free;
    wire                      f_valid;
    wire [AXI_DATA_WIDTH+1:0] f_data;
    wire                      fifo_in_ready;
    wire [15:0]               fifo_count;
    wire [AXI_DATA_WIDTH-1:0] f_rdata = f_data[AXI_DATA_WIDTH-1:0];
    wire                      f_rlast = f_data[AXI_DATA_WIDTH];
    wire                      f_rerr = f_data[AXI_DATA_WIDTH+1];

    fifo_fwft #(
        .WIDTH(AXI_DATA_WIDTH + 2),
        .DEPTH(FIFO_DEPTH)
    ) u_beats (
        .clk(clk),
        .rst(rst),
        .s_data({m_axi_rresp != 2'b00, m_axi_rlast, m_axi_rdata}),
        .s_valid(m_axi_rvalid),
        .s_ready(fifo_in_ready),
        .m_data(f_data),
        .m_valid(f_valid),
        .m_ready(f_ready),
        .count(fifo_count)
    );

    assign m_axi_rready = fifo_in_ready;
    wire r_hs = f_valid && f_ready;
    wire r_done = r_hs && f_rlast;
    wire ar_done = m_axi_rvalid && fifo_in_ready && m_axi_rlast;
    wire xfer = asm_full && out_free;
    integer b;

    always @(posedge clk) begin
        if (issue) begin
            ar_addr <= qp_base[AXI_ADDR_WIDTH*sel_q +: AXI_ADDR_WIDTH] + sel_off;
            ar_len <= qp_arlen[8*sel_q +: 8];
            meta_mem[meta_wr] <= {sel_q, sel_ci};
        end

        if (r_hs) begin
            // beat k lands at bytes k*BEAT_BYTES..; the first beat also clears the rest
            for (b = 0; b < FETCH_BEATS; b = b + 1) begin
                if (asm_beat == b[BEAT_CNT_W-1:0])
                    asm_buf[AXI_DATA_WIDTH*b +: AXI_DATA_WIDTH] <= f_rdata;
                else if (asm_beat == {BEAT_CNT_W{1'b0}})
                    asm_buf[AXI_DATA_WIDTH*b +: AXI_DATA_WIDTH] <= {AXI_DATA_WIDTH{1'b0}};
            end
            asm_err <= (asm_beat != {BEAT_CNT_W{1'b0}} && asm_err) || f_rerr;
        end
        if (r_done)
            asm_meta <= meta_mem[meta_rd];

        if (xfer) begin
            out_buf <= asm_buf;
            out_err <= asm_err;
            out_meta <= asm_meta;
        end

        if (rst) begin
            ar_valid <= 1'b0;
            reserved <= {RES_W{1'b0}};
            rr_ptr <= {QP_W{1'b0}};
            outstanding <= {OS_CNT_W{1'b0}};
            meta_wr <= {OS_PTR_W{1'b0}};
            meta_rd <= {OS_PTR_W{1'b0}};
            asm_full <= 1'b0;
            asm_beat <= {BEAT_CNT_W{1'b0}};
            out_valid <= 1'b0;
        end else begin
            if (issue) begin
                ar_valid <= 1'b1;
                rr_ptr <= sel_next;
                meta_wr <= meta_wr + 1'b1;
            end else if (m_axi_arready) begin
                ar_valid <= 1'b0;
            end
            if (issue)
                reserved <= reserved + sel_beats - {{(RES_W-1){1'b0}}, r_hs};
            else if (r_hs)
                reserved <= reserved - 1'b1;
            // bursts on the bus: from AR to the last R beat (into the beat FIFO)
            if (issue && !ar_done)
                outstanding <= outstanding + 1'b1;
            else if (!issue && ar_done)
                outstanding <= outstanding - 1'b1;

            if (r_hs)
                asm_beat <= f_rlast ? {BEAT_CNT_W{1'b0}} : asm_beat + 1'b1;
            if (r_done)
                meta_rd <= meta_rd + 1'b1;
            if (xfer)
                asm_full <= 1'b0;
            if (r_done)
                asm_full <= 1'b1;

            if (xfer)
                out_valid <= 1'b1;
            else if (m_wqe_ready)
                out_valid <= 1'b0;
        end
    end

    // per-QP registers: config has priority over doorbell and fetch in the same cycle
    always @(posedge clk) begin : qp_regs
        integer k;
        for (k = 0; k < NUM_QP; k = k + 1) begin
            if (rst) begin
                qp_en[k] <= 1'b0;
            end else if (cfg_hit && cfg_q == k[QP_W-1:0]) begin
                qp_en[k] <= cfg_enable;
                qp_base[AXI_ADDR_WIDTH*k +: AXI_ADDR_WIDTH] <= cfg_base;
                qp_mask[16*k +: 16] <= cfg_mask[15:0];
                qp_lstride[4*k +: 4] <= cfg_log_stride;
                qp_arlen[8*k +: 8] <= slot_arlen(cfg_log_stride);
                qp_pi[16*k +: 16] <= cfg_index;
                qp_ci[16*k +: 16] <= cfg_index;
            end else begin
                if (db_hit && db_q == k[QP_W-1:0] && qp_en[k])
                    qp_pi[16*k +: 16] <= db_pi;
                if (rw_hit && rw_q == k[QP_W-1:0])
                    qp_ci[16*k +: 16] <= rw_index;
                else if (issue && sel_q == k[QP_W-1:0])
                    qp_ci[16*k +: 16] <= sel_ci + 1'b1;
            end
        end
    end

    // ---------------------------------------------------------------- outputs
    assign m_axi_arid = {AXI_ID_WIDTH{1'b0}};
    assign m_axi_araddr = ar_addr;
    assign m_axi_arlen = ar_len;
    assign m_axi_arsize = BEAT_LOG[2:0];
    assign m_axi_arburst = 2'b01;   // INCR
    assign m_axi_arlock = 1'b0;
    assign m_axi_arcache = 4'b0011; // normal non-cacheable bufferable
    assign m_axi_arprot = 3'b010;   // unprivileged, non-secure, data
    assign m_axi_arvalid = ar_valid;

    assign m_wqe_valid = out_valid;
    assign m_wqe_err = out_err;
    assign m_wqe_qpn = {{(QPN_WIDTH-QP_W){1'b0}}, out_meta[16 +: QP_W]};
    assign m_wqe_index = out_meta[15:0];
    assign m_wqe_opcode = out_buf[7:0];
    assign m_wqe_flags = out_buf[15:8];
    assign m_wqe_num_sge = out_buf[23:16];
    assign m_wqe_imm_inv = out_buf[63:32];
    assign m_wqe_remote_addr = out_buf[127:64];
    assign m_wqe_rkey = out_buf[159:128];
    assign m_wqe_inline_len = out_buf[191:160];
    assign m_wqe_compare_add = out_buf[255:192];
    assign m_wqe_swap = out_buf[319:256];
    assign m_wqe_dest_qpn = out_buf[351:320];
    assign m_wqe_qkey = out_buf[383:352];
    generate
        for (g = 0; g < MAX_SGE; g = g + 1) begin : g_sge
            wire used = g < m_wqe_num_sge;
            wire [127:0] sge = used ? out_buf[8 * (CTRL_BYTES + SGE_BYTES * g) +: 128] : 128'd0;
            assign m_wqe_sge_addr[64*g +: 64] = sge[63:0];
            assign m_wqe_sge_len[32*g +: 32] = sge[95:64];
            assign m_wqe_sge_lkey[32*g +: 32] = sge[127:96];
        end
    endgenerate

    // inputs and bits deliberately not used: the reserved byte 3, slack after the last SGE
    /* verilator lint_off UNUSEDSIGNAL */
    wire [BUF_W:0] out_pad = {1'b0, out_buf};
    wire unused = &{1'b0, m_axi_rid, cfg_mask[16], out_buf[31:24], out_pad[BUF_W:8*FETCH_BYTES],
                    fifo_count};
    /* verilator lint_on UNUSEDSIGNAL */

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXI_RD_MASTER("wqe_fetch DMA", AXI_ID_WIDTH, AXI_ADDR_WIDTH, AXI_DATA_WIDTH)

endmodule
`default_nettype wire
