`default_nettype none
`include "nic_common.vh"
// axil_check: a passive AXI4-Lite protocol checker (ARM IHI 0022E, chapter B1) on a slave's
// ports, for simulation only: the master's rules and the slave's. It stops the simulation
// ($fatal) at the first violation, naming the rule, the interface (NAME) and the time:
//   L1  a VALID, once asserted, stays asserted until its handshake (A3.2.1), on all five
//       channels
//   L2  a channel's payload does not change while its VALID waits for READY
//   L3  a B response answers a write whose address and data were both accepted before it;
//       an R response answers a read address accepted before it (A3.3.1); one each
//   L4  no X or Z on a VALID or READY out of reset
// Instantiated on the modules' AXI4-Lite slave ports under `ifndef SYNTHESIS (see
// axis_check.v).
module axil_check #(
    parameter ADDR_WIDTH = 16,
    parameter DATA_WIDTH = 32,
    parameter NAME = "axil",
    parameter FATAL = 1
) (
    input wire                    clk,
    input wire                    rst,
    input wire [ADDR_WIDTH-1:0]   awaddr,
    input wire                    awvalid,
    input wire                    awready,
    input wire [DATA_WIDTH-1:0]   wdata,
    input wire [DATA_WIDTH/8-1:0] wstrb,
    input wire                    wvalid,
    input wire                    wready,
    input wire [1:0]              bresp,
    input wire                    bvalid,
    input wire                    bready,
    input wire [ADDR_WIDTH-1:0]   araddr,
    input wire                    arvalid,
    input wire                    arready,
    input wire [DATA_WIDTH-1:0]   rdata,
    input wire [1:0]              rresp,
    input wire                    rvalid,
    input wire                    rready
);
    `NIC_CHECK_FAIL_TASK("AXI4-Lite")

    reg [4:0]                  wait_q;  // AW, W, B, AR, R
    reg [ADDR_WIDTH-1:0]       aw_q, ar_q;
    reg [DATA_WIDTH*9/8-1:0]   w_q;
    reg [1:0]                  b_q;
    reg [DATA_WIDTH+1:0]       r_q;
    // Accepted and answered so far (only differences matter: they wrap together).
    reg [31:0] aws, ws, bs, ars, rs;

    wire [31:0] writes_in = (aws - bs) < (ws - bs) ? aws - bs : ws - bs;  // both halves in

    always @(posedge clk) begin
        if (rst !== 1'b0) begin  // (X before the bench drives it: not checked)
            wait_q <= 5'd0;
            aws <= 0;
            ws <= 0;
            bs <= 0;
            ars <= 0;
            rs <= 0;
        end else begin
            if ((^{awvalid, awready, wvalid, wready, bvalid, bready, arvalid, arready, rvalid,
                   rready}) === 1'bx)
                fail("L4: a VALID or READY is X");
            if (wait_q[0] && !awvalid) fail("L1: AWVALID dropped before AWREADY");
            else if (wait_q[0] && awaddr !== aw_q) fail("L2: AW changed while it waited");
            if (wait_q[1] && !wvalid) fail("L1: WVALID dropped before WREADY");
            else if (wait_q[1] && {wdata, wstrb} !== w_q) fail("L2: W changed while it waited");
            if (wait_q[2] && !bvalid) fail("L1: BVALID dropped before BREADY");
            else if (wait_q[2] && bresp !== b_q) fail("L2: B changed while it waited");
            if (wait_q[3] && !arvalid) fail("L1: ARVALID dropped before ARREADY");
            else if (wait_q[3] && araddr !== ar_q) fail("L2: AR changed while it waited");
            if (wait_q[4] && !rvalid) fail("L1: RVALID dropped before RREADY");
            else if (wait_q[4] && {rdata, rresp} !== r_q) fail("L2: R changed while it waited");
            if (bvalid && writes_in == 0)
                fail("L3: B with no write whose address and data are both in");
            if (rvalid && ars == rs)
                fail("L3: R with no read address accepted");
            wait_q <= {rvalid && !rready, arvalid && !arready, bvalid && !bready,
                       wvalid && !wready, awvalid && !awready};
            aw_q <= awaddr;
            w_q <= {wdata, wstrb};
            b_q <= bresp;
            ar_q <= araddr;
            r_q <= {rdata, rresp};
            aws <= aws + {31'd0, awvalid && awready};
            ws <= ws + {31'd0, wvalid && wready};
            bs <= bs + {31'd0, bvalid && bready};
            ars <= ars + {31'd0, arvalid && arready};
            rs <= rs + {31'd0, rvalid && rready};
        end
    end
endmodule
`default_nettype wire
