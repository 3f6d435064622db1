`default_nettype none
`include "nic_common.vh"
// nic_bar: BAR0 of the nsnic device (nicsim.hwif) as an AXI4-Lite slave: the command mailbox
// registers of page 0 and the doorbell pages (UARs) 1..MAX_UAR.
//
// Every hwif register is one aligned 8-byte word. On a 64-bit AXI4-Lite data bus
// (AXIL_DATA_WIDTH 64) each is read or written by ONE transaction (as one 64-bit PCIe MMIO TLP
// carries it), so a doorbell is a single atomic write; address bits 2:0 are ignored.
// On a 32-bit bus (AXIL_DATA_WIDTH 32: the AXI4-Lite master of a PCIe bridge such as XDMA's),
// a 64-bit access arrives as two, the low word (address bit 2 clear) first, as a bridge splits
// one 8-byte TLP, and as a 32-bit host splits a 64-bit store under a lock (mlx5's doorbell
// lock):
//   - page-0 registers take each word as it comes (byte strobes honoured); CMD_GO fires on
//     the write of its high word (0x02C), the second of a 64-bit store;
//   - a doorbell acts on its high word (the QPN or CQN half), with the low word written just
//     before to the same register; a high word without it (or with partial strobes in either
//     word) is a partial doorbell, dropped and counted as below; the low word alone does
//     nothing;
//   - reading a register's low word takes the whole 64 bits at once and returns the low half;
//     reading its high word next returns the high half of that same snapshot (so CMD_STATUS
//     reads as one value, and INT_STATUS, cleared by the low-word read, loses no bit). A high
//     word read without the low one before it returns the register's high half now.
// The BAR is BAR0_SIZE = (MAX_UAR + 1) * 4 KiB; address bits above AXIL_ADDR_WIDTH are not
// seen (the page number is addr[AXIL_ADDR_WIDTH-1:12]).
//
// Page 0 (hwif.Reg):
//   0x000 DEV_ID      RO  hwif.DEV_ID = 0x6e736e69_00000002
//   0x008 CMD_OPCODE  RW  \
//   0x010 CMD_IN      RW   | 64-bit registers, byte strobes honoured; they feed the command
//   0x018 CMD_OUT     RW   | processor, which latches them at CMD_GO
//   0x020 CMD_MOD     RW  /
//   0x028 CMD_GO      WO  any write: cmd_go pulses (the command processor ignores it while
//                         busy, as the model does); reads 0
//   0x030 CMD_STATUS  RO  busy: 1 << 63 (bits 7:0 read 0 then, like the model); idle:
//                         the CmdStatus of the last command in bits 7:0
//   0x058 INT_STATUS  RC  bits set by int_set pulses, cleared by a read (returns the bits)
//   anything else reads 0; writes to it (and to RO registers) are ignored. (The model keeps
//   any written page-0 offset and reads it back; the driver never relies on that.)
//
// Doorbell pages, uar = page number (hwif.uar_offset), registers hwif.UarReg:
//   0x000 SQ_DB   (qpn << 32) | sq producer index (bits 15:0)
//   0x008 RQ_DB   (qpn << 32) | rq producer index (bits 15:0)
//   0x010 CQ_ARM  (cqn << 32) | (solicited_only << 31)
// A doorbell is taken only if its QP (CQ for CQ_ARM) exists and was created with this page's
// UAR (nicsim.nic.nic.Nic._doorbell): the command processor records each QP's and CQ's owner
// UAR here through the bind port at create and clears it at destroy. Anything else written
// into a doorbell page (unknown QP/CQ, another page's QP/CQ, an offset other than the three
// registers, a number >= NUM_QP / NUM_CQ) is dropped and counted in cnt_db_drop, as the
// model's sched.doorbell_bad_target. A doorbell write must carry all 8 byte strobes (a 64-bit
// store); a partial write to a doorbell page is dropped and counted too. Doorbell pages read 0.
//
// Timing: a write is taken when AWVALID and WVALID are both high and no write response is
// pending (awready = wready in that cycle; one write per two cycles at most), BRESP is always
// OKAY. A read is taken when no read data is pending (arready = !rvalid); RDATA is registered.
// cmd_go pulses one cycle after the write is taken (the cycle its B response is presented),
// so a CMD_STATUS read issued after that response already sees busy. A doorbell event leaves
// on db_* / arm_* two cycles after its write is taken (binding-table read, compare); events
// have no backpressure. A bind update and a doorbell lookup of the same number in the same
// cycle: the lookup sees the old binding (software creates before it rings).
//
// Parameters:
//   AXIL_ADDR_WIDTH  AXI-Lite address width (>= 12 + clog2(MAX_UAR + 1))
//   AXIL_DATA_WIDTH  AXI-Lite data width: 64 or 32 (see above)
//   MAX_UAR          doorbell pages (hwif.MAX_UAR; reported by QUERY_DEVICE)
//   NUM_QP, NUM_CQ   QP / CQ numbers 0..NUM-1 exist in the binding tables (>= 2)
//   QPN_WIDTH        width of db_qpn (<= 32)
//   CQN_WIDTH        width of arm_cqn (<= 32)
//
// Ports:
//   clk, rst                     clock, synchronous active-high reset (no QP/CQ bound)
//   s_axil_aw*/w*/b*/ar*/r*      AXI4-Lite slave, AXIL_DATA_WIDTH-bit data
//   cmd_go                       pulse: run the command in cmd_opcode/in/out/mod
//   cmd_opcode, cmd_in, cmd_out, cmd_mod [63:0]   the mailbox registers
//   cmd_busy, cmd_status[7:0]    from the command processor (CMD_STATUS)
//   int_set[63:0]                interrupt cause bits to set in INT_STATUS
//   bind_valid                   set the owner UAR of a QP (bind_cq 0) or CQ (bind_cq 1)
//   bind_cq, bind_num, bind_uar  number and UAR (bind_uar 0: unbound, doorbells dropped)
//   db_valid, db_rq, db_qpn, db_pi[15:0]   an accepted SQ (db_rq 0) or RQ (1) doorbell
//   arm_valid, arm_cqn, arm_solicited      an accepted CQ_ARM
//   cnt_db_sq, cnt_db_rq, cnt_arm, cnt_db_drop [31:0]   event counters (wrap)
module nic_bar #(
    parameter AXIL_ADDR_WIDTH = 23,
    parameter AXIL_DATA_WIDTH = 64,
    parameter MAX_UAR = 1024,
    parameter NUM_QP = 64,
    parameter NUM_CQ = 64,
    parameter QPN_WIDTH = 24,
    parameter CQN_WIDTH = 24
) (
    input  wire                        clk,
    input  wire                        rst,

    `NIC_AXIL_SLAVE_PORTS(AXIL_ADDR_WIDTH, AXIL_DATA_WIDTH),

    output wire                        cmd_go,
    output reg  [63:0]                 cmd_opcode,
    output reg  [63:0]                 cmd_in,
    output reg  [63:0]                 cmd_out,
    output reg  [63:0]                 cmd_mod,
    input  wire                        cmd_busy,
    input  wire [7:0]                  cmd_status,

    input  wire [63:0]                 int_set,

    input  wire                        bind_valid,
    input  wire                        bind_cq,
    input  wire [31:0]                 bind_num,
    input  wire [15:0]                 bind_uar,

    output reg                         db_valid,
    output reg                         db_rq,
    output reg  [QPN_WIDTH-1:0]        db_qpn,
    output reg  [15:0]                 db_pi,
    output reg                         arm_valid,
    output reg  [CQN_WIDTH-1:0]        arm_cqn,
    output reg                         arm_solicited,

    output reg  [31:0]                 cnt_db_sq,
    output reg  [31:0]                 cnt_db_rq,
    output reg  [31:0]                 cnt_arm,
    output reg  [31:0]                 cnt_db_drop
);

    `NIC_CLOG2_FUNCTION

    localparam [63:0] DEV_ID = 64'h6e736e69_00000002;  // hwif.DEV_ID (HWIF_VERSION 2)
    localparam PAGE_W = AXIL_ADDR_WIDTH - 12;
    localparam UAR_W = clog2(MAX_UAR + 1);
    localparam QP_AW = clog2(NUM_QP);
    localparam CQ_AW = clog2(NUM_CQ);

    // page-0 word offsets (addr[11:3])
    localparam [8:0] R_DEV_ID = 9'h000;
    localparam [8:0] R_CMD_OPCODE = 9'h001;
    localparam [8:0] R_CMD_IN = 9'h002;
    localparam [8:0] R_CMD_OUT = 9'h003;
    localparam [8:0] R_CMD_MOD = 9'h004;
    localparam [8:0] R_CMD_GO = 9'h005;
    localparam [8:0] R_CMD_STATUS = 9'h006;
    localparam [8:0] R_INT_STATUS = 9'h00b;
    // doorbell page word offsets
    localparam [8:0] U_SQ_DB = 9'h000;
    localparam [8:0] U_RQ_DB = 9'h001;
    localparam [8:0] U_CQ_ARM = 9'h002;

    // ---------------------------------------------------------------- binding tables
    // owner UAR per QP / CQ: valid bits in flops (cleared by reset), the UAR in a RAM
    reg [NUM_QP-1:0]  qp_bound;
    reg [NUM_CQ-1:0]  cq_bound;
    reg [UAR_W-1:0]   qp_uar_mem [0:NUM_QP-1];
    reg [UAR_W-1:0]   cq_uar_mem [0:NUM_CQ-1];

    wire bind_qp_hit = bind_valid && !bind_cq && bind_num < NUM_QP;
    wire bind_cq_hit = bind_valid && bind_cq && bind_num < NUM_CQ;
    wire [QP_AW-1:0] bind_qp_a = bind_num[QP_AW-1:0];
    wire [CQ_AW-1:0] bind_cq_a = bind_num[CQ_AW-1:0];
    wire bind_set = bind_uar != 16'd0;

    // ---------------------------------------------------------------- write path
    reg                 bvalid;
    reg                 w_v;       // stage A: the write taken last cycle
    reg [PAGE_W-1:0]    w_page;
    reg [8:0]           w_word;
    reg [63:0]          w_data;
    reg [7:0]           w_strb;

    wire wr_take = s_axil_awvalid && s_axil_wvalid && !bvalid;

    // The write as a 64-bit word (bus_data, bus_strb) and whether it is a low word alone
    // (32-bit bus: held for the high word, bus_lo_only).
    wire [63:0] bus_data;
    wire [7:0]  bus_strb;
    wire        bus_lo_only;
    reg         w_lo_only;   // stage A: a 32-bit bus's low word, whose high word is to come
    generate
        if (AXIL_DATA_WIDTH == 32) begin : g_bus32
            reg [31:0]                 lo_data;
            reg [3:0]                  lo_strb;
            reg [AXIL_ADDR_WIDTH-4:0]  lo_addr;  // the 8-byte word the low word was for
            reg                        lo_v;
            wire hi = s_axil_awaddr[2];
            wire lo_match = lo_v && lo_addr == s_axil_awaddr[AXIL_ADDR_WIDTH-1:3];
            assign bus_data = hi ? {s_axil_wdata, lo_match ? lo_data : 32'd0}
                                 : {32'd0, s_axil_wdata};
            assign bus_strb = hi ? {s_axil_wstrb, lo_match ? lo_strb : 4'd0}
                                 : {4'd0, s_axil_wstrb};
            assign bus_lo_only = !hi;
            always @(posedge clk) begin
                if (rst) begin
                    lo_v <= 1'b0;
                end else if (wr_take) begin
                    lo_v <= !hi;
                    lo_data <= s_axil_wdata;
                    lo_strb <= s_axil_wstrb;
                    lo_addr <= s_axil_awaddr[AXIL_ADDR_WIDTH-1:3];
                end
            end
        end else begin : g_bus64
            assign bus_data = s_axil_wdata;
            assign bus_strb = s_axil_wstrb;
            assign bus_lo_only = 1'b0;
        end
    endgenerate
    assign s_axil_awready = wr_take;
    assign s_axil_wready = wr_take;
    assign s_axil_bvalid = bvalid;
    assign s_axil_bresp = 2'b00;

    wire w_page0 = w_page == {PAGE_W{1'b0}};
    assign cmd_go = w_v && w_page0 && w_word == R_CMD_GO && !w_lo_only;

    // byte-strobe merge of a 64-bit register
    function [63:0] merge;
        input [63:0] old;
        input [63:0] data;
        input [7:0] strb;
        integer k;
        begin
            for (k = 0; k < 8; k = k + 1)
                merge[8*k +: 8] = strb[k] ? data[8*k +: 8] : old[8*k +: 8];
        end
    endfunction

    // stage A of a doorbell: which table, which entry, is the write well-formed
    wire        a_db = w_v && !w_page0 && !w_lo_only;
    wire        a_is_cq = w_word == U_CQ_ARM;
    wire        a_reg_ok = (w_word == U_SQ_DB || w_word == U_RQ_DB || a_is_cq) && w_strb == 8'hff;
    wire [31:0] a_num = w_data[63:32];
    wire        a_in_range = a_is_cq ? a_num < NUM_CQ : a_num < NUM_QP;
    wire        a_bound = a_is_cq ? cq_bound[a_num[CQ_AW-1:0]] : qp_bound[a_num[QP_AW-1:0]];

    // stage B: binding RAM data + the registered doorbell
    reg                 b_v;
    reg                 b_ok;      // well-formed, in range, bound
    reg                 b_is_cq;
    reg                 b_rq;
    reg [PAGE_W-1:0]    b_page;
    reg [63:0]          b_data;
    reg [UAR_W-1:0]     qp_uar_q;
    reg [UAR_W-1:0]     cq_uar_q;

    wire [UAR_W-1:0] b_uar = b_is_cq ? cq_uar_q : qp_uar_q;
    /* verilator lint_off WIDTHEXPAND */
    wire [31:0] b_page32 = b_page;       // zero-extended
    wire [31:0] b_uar32 = b_uar;
    /* verilator lint_on WIDTHEXPAND */
    wire b_hit = b_v && b_ok && b_page32 == b_uar32;

    always @(posedge clk) begin
        if (bind_qp_hit)
            qp_uar_mem[bind_qp_a] <= bind_uar[UAR_W-1:0];
        qp_uar_q <= qp_uar_mem[a_num[QP_AW-1:0]];
    end

    always @(posedge clk) begin
        if (bind_cq_hit)
            cq_uar_mem[bind_cq_a] <= bind_uar[UAR_W-1:0];
        cq_uar_q <= cq_uar_mem[a_num[CQ_AW-1:0]];
    end

    always @(posedge clk) begin
        if (wr_take) begin
            w_page <= s_axil_awaddr[AXIL_ADDR_WIDTH-1:12];
            w_word <= s_axil_awaddr[11:3];
            w_data <= bus_data;
            w_strb <= bus_strb;
            w_lo_only <= bus_lo_only;
        end
        b_is_cq <= a_is_cq;
        b_rq <= w_word == U_RQ_DB;
        b_page <= w_page;
        b_data <= w_data;
        b_ok <= a_reg_ok && a_in_range && a_bound;

        db_rq <= b_rq;
        db_qpn <= b_data[32 +: QPN_WIDTH];
        db_pi <= b_data[15:0];
        arm_cqn <= b_data[32 +: CQN_WIDTH];
        arm_solicited <= b_data[31];

        if (rst) begin
            bvalid <= 1'b0;
            w_v <= 1'b0;
            b_v <= 1'b0;
            db_valid <= 1'b0;
            arm_valid <= 1'b0;
            cmd_opcode <= 64'd0;
            cmd_in <= 64'd0;
            cmd_out <= 64'd0;
            cmd_mod <= 64'd0;
            qp_bound <= {NUM_QP{1'b0}};
            cq_bound <= {NUM_CQ{1'b0}};
            cnt_db_sq <= 32'd0;
            cnt_db_rq <= 32'd0;
            cnt_arm <= 32'd0;
            cnt_db_drop <= 32'd0;
        end else begin
            if (wr_take)
                bvalid <= 1'b1;
            else if (s_axil_bready)
                bvalid <= 1'b0;
            w_v <= wr_take;
            b_v <= a_db;

            if (w_v && w_page0) begin
                case (w_word)
                    R_CMD_OPCODE: cmd_opcode <= merge(cmd_opcode, w_data, w_strb);
                    R_CMD_IN: cmd_in <= merge(cmd_in, w_data, w_strb);
                    R_CMD_OUT: cmd_out <= merge(cmd_out, w_data, w_strb);
                    R_CMD_MOD: cmd_mod <= merge(cmd_mod, w_data, w_strb);
                    default: ;
                endcase
            end

            if (bind_qp_hit)
                qp_bound[bind_qp_a] <= bind_set;
            if (bind_cq_hit)
                cq_bound[bind_cq_a] <= bind_set;

            db_valid <= b_hit && !b_is_cq;
            arm_valid <= b_hit && b_is_cq;
            if (b_hit && !b_is_cq && !b_rq)
                cnt_db_sq <= cnt_db_sq + 32'd1;
            if (b_hit && !b_is_cq && b_rq)
                cnt_db_rq <= cnt_db_rq + 32'd1;
            if (b_hit && b_is_cq)
                cnt_arm <= cnt_arm + 32'd1;
            if (b_v && !b_hit)
                cnt_db_drop <= cnt_db_drop + 32'd1;
        end
    end

    // ---------------------------------------------------------------- read path
    reg        rvalid;
    reg [AXIL_DATA_WIDTH-1:0] rdata;
    reg [63:0] int_status;
    reg [63:0] r_value;  // the addressed register's 64 bits now

    wire rd_take = s_axil_arvalid && !rvalid;
    wire r_page0 = s_axil_araddr[AXIL_ADDR_WIDTH-1:12] == {PAGE_W{1'b0}};
    wire [8:0] r_word = s_axil_araddr[11:3];
    wire r_snap_hi;      // a 32-bit bus's high word read, answered from the low word's snapshot
    wire int_clear = rd_take && r_page0 && r_word == R_INT_STATUS && !r_snap_hi;

    assign s_axil_arready = !rvalid;
    assign s_axil_rvalid = rvalid;
    assign s_axil_rresp = 2'b00;
    assign s_axil_rdata = rdata;

    always @(*) begin
        r_value = 64'd0;
        if (r_page0) begin
            case (r_word)
                R_DEV_ID: r_value = DEV_ID;
                R_CMD_OPCODE: r_value = cmd_opcode;
                R_CMD_IN: r_value = cmd_in;
                R_CMD_OUT: r_value = cmd_out;
                R_CMD_MOD: r_value = cmd_mod;
                R_CMD_STATUS: r_value = cmd_busy ? 64'h80000000_00000000 : {56'd0, cmd_status};
                R_INT_STATUS: r_value = int_status;
                default: ;
            endcase
        end
    end

    generate
        if (AXIL_DATA_WIDTH == 32) begin : g_rd32
            reg [31:0]                snap_hi;
            reg [AXIL_ADDR_WIDTH-4:0] snap_addr;
            reg                       snap_v;
            wire hi = s_axil_araddr[2];
            assign r_snap_hi = hi && snap_v && snap_addr == s_axil_araddr[AXIL_ADDR_WIDTH-1:3];
            always @(posedge clk) begin
                if (rst) begin
                    snap_v <= 1'b0;
                end else if (rd_take) begin
                    snap_v <= !hi;
                    snap_hi <= r_value[63:32];
                    snap_addr <= s_axil_araddr[AXIL_ADDR_WIDTH-1:3];
                    rdata <= !hi ? r_value[31:0] : r_snap_hi ? snap_hi : r_value[63:32];
                end
            end
        end else begin : g_rd64
            assign r_snap_hi = 1'b0;
            always @(posedge clk)
                if (rd_take)
                    rdata <= r_value;
        end
    endgenerate

    always @(posedge clk) begin
        if (rst) begin
            rvalid <= 1'b0;
            int_status <= 64'd0;
        end else begin
            if (rd_take)
                rvalid <= 1'b1;
            else if (s_axil_rready)
                rvalid <= 1'b0;
            int_status <= (int_clear ? 64'd0 : int_status) | int_set;
        end
    end

    /* verilator lint_off UNUSEDSIGNAL */
    wire unused = &{1'b0, s_axil_awprot, s_axil_arprot, s_axil_awaddr[2:0], s_axil_araddr[2:0],
                    bind_uar, bind_num, b_data};
    /* verilator lint_on UNUSEDSIGNAL */

endmodule
`default_nettype wire
