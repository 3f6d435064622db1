`default_nettype none
`include "nic_common.vh"
// axi4_check: a passive AXI4 protocol checker (ARM IHI 0022E) on a master's ports, for
// simulation only: the master's rules and those of the slave answering it. It stops the
// simulation ($fatal) at the first violation, naming the rule, the interface (NAME) and the
// time:
//   A1  a VALID, once asserted, stays asserted until its handshake (A3.2.1), on all five
//       channels
//   A2  a channel's payload does not change while its VALID waits for READY (A3.2.1)
//   A3  an INCR burst does not cross a 4 KiB boundary (A3.4.1); AxBURST is not the reserved
//       value; AxSIZE is not wider than the data bus (A3.4.1)
//   A4  WLAST is on exactly beat AWLEN+1 of each write burst, write data in the order of the
//       addresses (AXI4 has no write interleaving, A5.2); the data may come first (A3.3.1)
//   A5  every R beat answers a read outstanding on its RID, and RLAST is on exactly its
//       beat ARLEN+1; reads of one ID answered in order, of different IDs in any order and
//       interleaved (A5.3.1)
//   A6  a B response answers a write whose address and last data beat were both accepted
//       before it, on its BID (A3.3.1)
//   A7  no X or Z on a VALID or READY out of reset
// Instantiated on the modules' AXI4 master ports under `ifndef SYNTHESIS (see axis_check.v).
// DEPTH bounds the bursts it tracks per ID and direction (more is reported, not mis-checked).
module axi4_check #(
    parameter ID_WIDTH = 4,
    parameter ADDR_WIDTH = 64,
    parameter DATA_WIDTH = 64,
    parameter DEPTH = 32,
    parameter NAME = "axi4",
    parameter FATAL = 1
) (
    input wire                    clk,
    input wire                    rst,
    input wire [ID_WIDTH-1:0]     awid,
    input wire [ADDR_WIDTH-1:0]   awaddr,
    input wire [7:0]              awlen,
    input wire [2:0]              awsize,
    input wire [1:0]              awburst,
    input wire                    awvalid,
    input wire                    awready,
    input wire [DATA_WIDTH-1:0]   wdata,
    input wire [DATA_WIDTH/8-1:0] wstrb,
    input wire                    wlast,
    input wire                    wvalid,
    input wire                    wready,
    input wire [ID_WIDTH-1:0]     bid,
    input wire [1:0]              bresp,
    input wire                    bvalid,
    input wire                    bready,
    input wire [ID_WIDTH-1:0]     arid,
    input wire [ADDR_WIDTH-1:0]   araddr,
    input wire [7:0]              arlen,
    input wire [2:0]              arsize,
    input wire [1:0]              arburst,
    input wire                    arvalid,
    input wire                    arready,
    input wire [ID_WIDTH-1:0]     rid,
    input wire [DATA_WIDTH-1:0]   rdata,
    input wire [1:0]              rresp,
    input wire                    rlast,
    input wire                    rvalid,
    input wire                    rready
);
    `NIC_CLOG2_FUNCTION

    localparam NID = 1 << ID_WIDTH;
    localparam QW = clog2(DEPTH);
    localparam integer MAX_SIZE_I = clog2(DATA_WIDTH / 8);
    localparam [2:0] MAX_SIZE = MAX_SIZE_I[2:0];

    `NIC_CHECK_FAIL_TASK("AXI4")

    // -- A1, A2: each channel's last cycle, if its beat waited ------------------------------
    wire [ID_WIDTH+ADDR_WIDTH+12:0] aw_pay = {awid, awaddr, awlen, awsize, awburst};
    wire [ID_WIDTH+ADDR_WIDTH+12:0] ar_pay = {arid, araddr, arlen, arsize, arburst};
    wire [DATA_WIDTH*9/8:0]         w_pay = {wdata, wstrb, wlast};
    wire [DATA_WIDTH+ID_WIDTH+2:0]  r_pay = {rid, rdata, rresp, rlast};
    wire [ID_WIDTH+1:0]             b_pay = {bid, bresp};
    reg  [4:0]                      wait_q;  // AW, W, B, AR, R
    reg  [ID_WIDTH+ADDR_WIDTH+12:0] aw_q, ar_q;
    reg  [DATA_WIDTH*9/8:0]         w_q;
    reg  [DATA_WIDTH+ID_WIDTH+2:0]  r_q;
    reg  [ID_WIDTH+1:0]             b_q;

    // -- A3: the bytes an INCR burst spans from its start's 4 KiB page -----------------------
    function automatic [13:0] span_end;  // (address mod 4 KiB, aligned) + bytes of the burst
        input [11:0] addr;
        input [7:0]  len;
        input [2:0]  size;
        begin
            span_end = {2'b00, addr & ~((12'd1 << size) - 12'd1)} + (({6'd0, len} + 14'd1) << size);
        end
    endfunction

    // -- A4, A6: write addresses and write data ends, matched in order ----------------------
    // At most one of the two queues holds entries: an arrival on one side is matched with
    // the other's oldest entry.
    reg [7:0]          awq_len [0:DEPTH-1];
    reg [ID_WIDTH-1:0] awq_id [0:DEPTH-1];
    reg [QW:0]         awq_n;
    reg [QW-1:0]       awq_rd;
    reg [8:0]          wq_len [0:DEPTH-1];  // beats of write bursts whose address is to come
    reg [QW:0]         wq_n;
    reg [QW-1:0]       wq_rd;
    reg [8:0]          w_beats;         // beats of the write burst in progress
    reg [31:0]         b_due [0:NID-1];     // writes complete and unanswered, per ID
    reg                aw_taken;            // this cycle's address matched this cycle's data

    // -- A5: read bursts outstanding per ID ---------------------------------------------------
    reg [7:0]  rq_len [0:NID*DEPTH-1];
    reg [QW:0] rq_n [0:NID-1];
    reg [QW-1:0] rq_rd [0:NID-1];
    reg [8:0]  r_beats [0:NID-1];
    reg [QW-1:0] slot;

    wire aw_hs = awvalid && awready;
    wire w_hs = wvalid && wready;
    wire b_hs = bvalid && bready;
    wire ar_hs = arvalid && arready;
    wire r_hs = rvalid && rready;

    integer i;

    // The bookkeeping below updates the queues with blocking assignments, in the order of one
    // cycle's events (a B, then a write's end, then an address; an R, then an AR): it is a
    // simulation-only checker and drives nothing.
    /* verilator lint_off BLKSEQ */
    // A write burst whose address (len, id) and data (beats) are both in: WLAST's place is
    // checked and its B response becomes due.
    task automatic write_done(input [7:0] len, input [ID_WIDTH-1:0] id, input [8:0] beats);
        begin
            if (beats != {1'b0, len} + 9'd1)
                fail("A4: WLAST not on beat AWLEN+1 of its burst");
            b_due[id] = b_due[id] + 1;
        end
    endtask

    always @(posedge clk) begin
        if (rst !== 1'b0) begin  // (X before the bench drives it: not checked)
            wait_q <= 5'd0;
            awq_n = 0;
            awq_rd = 0;
            wq_n = 0;
            wq_rd = 0;
            w_beats <= 0;
            for (i = 0; i < NID; i = i + 1) begin
                b_due[i] = 0;
                rq_n[i] = 0;
                rq_rd[i] = 0;
                r_beats[i] = 0;
            end
        end else begin
            if ((^{awvalid, awready, wvalid, wready, bvalid, bready, arvalid, arready, rvalid,
                   rready}) === 1'bx)
                fail("A7: a VALID or READY is X");
            // A1, A2
            if (wait_q[0] && !awvalid) fail("A1: AWVALID dropped before AWREADY");
            else if (wait_q[0] && aw_pay !== aw_q) fail("A2: AW changed while it waited");
            if (wait_q[1] && !wvalid) fail("A1: WVALID dropped before WREADY");
            else if (wait_q[1] && w_pay !== w_q) fail("A2: W changed while it waited");
            if (wait_q[2] && !bvalid) fail("A1: BVALID dropped before BREADY");
            else if (wait_q[2] && b_pay !== b_q) fail("A2: B changed while it waited");
            if (wait_q[3] && !arvalid) fail("A1: ARVALID dropped before ARREADY");
            else if (wait_q[3] && ar_pay !== ar_q) fail("A2: AR changed while it waited");
            if (wait_q[4] && !rvalid) fail("A1: RVALID dropped before RREADY");
            else if (wait_q[4] && r_pay !== r_q) fail("A2: R changed while it waited");
            wait_q <= {rvalid && !rready, arvalid && !arready, bvalid && !bready,
                       wvalid && !wready, awvalid && !awready};
            aw_q <= aw_pay;
            ar_q <= ar_pay;
            w_q <= w_pay;
            r_q <= r_pay;
            b_q <= b_pay;
            // A3
            if (awvalid && awburst == 2'b11) fail("A3: AWBURST is the reserved value");
            if (arvalid && arburst == 2'b11) fail("A3: ARBURST is the reserved value");
            if (awvalid && awsize > MAX_SIZE) fail("A3: AWSIZE is wider than the bus");
            if (arvalid && arsize > MAX_SIZE) fail("A3: ARSIZE is wider than the bus");
            if (awvalid && awburst == 2'b01 && span_end(awaddr[11:0], awlen, awsize) > 14'd4096)
                fail("A3: a write burst crosses a 4 KiB boundary");
            if (arvalid && arburst == 2'b01 && span_end(araddr[11:0], arlen, arsize) > 14'd4096)
                fail("A3: a read burst crosses a 4 KiB boundary");
            // B before the write's matching below: it needs a write complete in an earlier
            // cycle (A6)
            if (b_hs) begin
                if (b_due[bid] == 0) fail("A6: B for an ID with no complete write");
                else b_due[bid] = b_due[bid] - 1;
            end
            // A4: the write data's end and the write addresses, matched in order
            aw_taken = 1'b0;
            if (w_hs && wlast) begin
                if (awq_n != 0) begin
                    write_done(awq_len[awq_rd], awq_id[awq_rd], w_beats + 9'd1);
                    awq_rd = awq_rd + 1'b1;
                    awq_n = awq_n - 1'b1;
                end else if (aw_hs) begin
                    write_done(awlen, awid, w_beats + 9'd1);
                    aw_taken = 1'b1;
                end else if (wq_n == DEPTH) begin
                    fail("A4: checker full: too many write bursts ahead of their address");
                end else begin
                    wq_len[wq_rd + wq_n[QW-1:0]] = w_beats + 9'd1;
                    wq_n = wq_n + 1'b1;
                end
            end else if (w_hs && awq_n != 0 && w_beats == {1'b0, awq_len[awq_rd]}) begin
                fail("A4: no WLAST on beat AWLEN+1");
            end
            if (aw_hs && !aw_taken) begin
                if (wq_n != 0) begin
                    write_done(awlen, awid, wq_len[wq_rd]);
                    wq_rd = wq_rd + 1'b1;
                    wq_n = wq_n - 1'b1;
                end else if (awq_n == DEPTH) begin
                    fail("A4: checker full: too many write addresses ahead of their data");
                end else begin
                    awq_len[awq_rd + awq_n[QW-1:0]] = awlen;
                    awq_id[awq_rd + awq_n[QW-1:0]] = awid;
                    awq_n = awq_n + 1'b1;
                end
            end
            if (w_hs) w_beats <= wlast ? 9'd0 : w_beats + 9'd1;
            // A5: R before this cycle's AR (a read's data follows its address)
            if (r_hs) begin
                if (rq_n[rid] == 0) begin
                    fail("A5: R beat on an ID with no read outstanding");
                end else if (rlast != (r_beats[rid] == {1'b0, rq_len[rid * DEPTH + rq_rd[rid]]})) begin
                    fail("A5: RLAST not on beat ARLEN+1 of its burst");
                end else if (rlast) begin
                    rq_rd[rid] = rq_rd[rid] + 1'b1;
                    rq_n[rid] = rq_n[rid] - 1'b1;
                    r_beats[rid] = 0;
                end else begin
                    r_beats[rid] = r_beats[rid] + 9'd1;
                end
            end
            if (ar_hs) begin
                if (rq_n[arid] == DEPTH) begin
                    fail("A5: checker full: too many reads outstanding on one ID");
                end else begin
                    slot = rq_rd[arid] + rq_n[arid][QW-1:0];  // (wraps at DEPTH)
                    rq_len[arid * DEPTH + slot] = arlen;
                    rq_n[arid] = rq_n[arid] + 1'b1;
                end
            end
        end
    end
    /* verilator lint_on BLKSEQ */
endmodule
`default_nettype wire
