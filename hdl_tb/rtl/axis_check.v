`default_nettype none
`include "nic_common.vh"
// axis_check: a passive AXI-Stream protocol checker (ARM IHI 0051B), for simulation only. It
// watches one stream and stops the simulation ($fatal) at the first violation, naming the
// rule, the stream (NAME) and the time:
//   S1  TVALID, once asserted, stays asserted until the transfer (2.2.1)
//   S2  TDATA, TKEEP, TLAST and TUSER do not change while TVALID waits for TREADY (2.2.1)
//   S3  PACKED: every beat but a frame's last has all TKEEP bits set, and a last beat's
//       TKEEP is a run of ones from byte 0, never zero (a continuous aligned stream, 2.7.3;
//       what the MACs and nicsim's blocks exchange)
//   S4  no X or Z on TVALID and TREADY out of reset, nor on TKEEP and TLAST in a valid beat
// The modules instantiate it on their stream ports under `ifndef SYNTHESIS (Yosys defines
// SYNTHESIS), so every bench checks every stream of its top, and a parent's checks cover the
// streams between its blocks. FATAL = 0 only counts violations in `errors` (its own test).
module axis_check #(
    parameter DATA_WIDTH = 64,
    parameter KEEP_WIDTH = DATA_WIDTH / 8,
    parameter USER_WIDTH = 1,
    parameter PACKED = 1,
    parameter NAME = "axis",
    parameter FATAL = 1
) (
    input wire                  clk,
    input wire                  rst,
    input wire [DATA_WIDTH-1:0] tdata,
    input wire [KEEP_WIDTH-1:0] tkeep,
    input wire                  tvalid,
    input wire                  tready,
    input wire                  tlast,
    input wire [USER_WIDTH-1:0] tuser
);
    reg                  waiting;  // a beat was offered and not taken last cycle
    reg [DATA_WIDTH-1:0] data_q;
    reg [KEEP_WIDTH-1:0] keep_q;
    reg                  last_q;
    reg [USER_WIDTH-1:0] user_q;
    `NIC_CHECK_FAIL_TASK("AXI-Stream")

    // A run of ones from bit 0 (1, 11, 111, ...): adding one leaves no bit in common.
    wire keep_low_run = tkeep != {KEEP_WIDTH{1'b0}} && ((tkeep & (tkeep + 1'b1)) == 0);

    always @(posedge clk) begin
        if (rst !== 1'b0) begin  // (X before the bench drives it: not checked)
            waiting <= 1'b0;
        end else begin
            if ((^{tvalid, tready}) === 1'bx)
                fail("S4: TVALID or TREADY is X");
            else if (tvalid && (^{tkeep, tlast}) === 1'bx)
                fail("S4: TKEEP or TLAST is X in a valid beat");
            if (waiting && !tvalid)
                fail("S1: TVALID dropped before TREADY took the beat");
            else if (waiting && (tdata !== data_q || tkeep !== keep_q || tlast !== last_q
                                 || tuser !== user_q))
                fail("S2: the beat changed while it waited for TREADY");
            if (PACKED != 0 && tvalid && !tlast && tkeep != {KEEP_WIDTH{1'b1}})
                fail("S3: a beat before the last has TKEEP bits clear");
            else if (PACKED != 0 && tvalid && tlast && !keep_low_run)
                fail("S3: the last beat's TKEEP is not a run of ones from byte 0");
            waiting <= tvalid && !tready;
            data_q <= tdata;
            keep_q <= tkeep;
            last_q <= tlast;
            user_q <= tuser;
        end
    end
endmodule
`default_nettype wire
