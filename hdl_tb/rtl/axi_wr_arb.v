`default_nettype none
`include "nic_common.vh"
// axi_wr_arb: PORTS AXI4 write masters share one AXI4 write master port, and say when every
// write they issued has been answered (the fence of the command processor).
//
// AW: round-robin among the ports with AWVALID through a registered AW stage, with
// AWID = {port's AWID, port index} (port index in the low PORT_W bits). A granted port owns
// the W channel until its WLAST handshake: AXI4 has no write interleaving, so the next AW is
// granted only after that (one burst's AW and W at a time; B responses may be outstanding for
// many). W is a combinational mux from the owner (ready-to-ready, valid-to-valid); a port's W
// beats wait (WREADY low) until its AW is granted.
// B: routed by BID's low bits, BID shifted back to the port's own ID; BREADY from that port
// while BVALID is high.
//
// idle is high when no write is anywhere between a port and its B response: no port asserts
// AWVALID, no AW is waiting in the register, no W burst is in progress and every AW accepted
// by the slave has had its B response. A B response means the write has landed (for PCIe:
// the posted write is ordered before anything the device does after it).
//
// Parameters:
//   PORTS       write masters (>= 2)
//   DATA_WIDTH  AXI data width
//   ADDR_WIDTH  AXI address width
//   S_ID_WIDTH  ID width of each port
//   M_ID_WIDTH  ID width of the shared port (>= S_ID_WIDTH + clog2(PORTS))
//   CNT_WIDTH   width of the outstanding-write counter (writes awaiting B < 2**CNT_WIDTH)
//
// Ports:
//   clk, rst                      clock, synchronous active-high reset
//   s_axi_aw*, s_axi_w*, s_axi_b* the ports, flattened: port p's field at [p*W +: W]
//   m_axi_aw*, m_axi_w*, m_axi_b* the shared AXI4 write master
//   idle                          no write in flight (see above)
module axi_wr_arb #(
    parameter PORTS = 2,
    parameter DATA_WIDTH = 64,
    parameter ADDR_WIDTH = 64,
    parameter S_ID_WIDTH = 4,
    parameter M_ID_WIDTH = 5,
    parameter CNT_WIDTH = 8
) (
    input  wire                            clk,
    input  wire                            rst,

    input  wire [PORTS*S_ID_WIDTH-1:0]     s_axi_awid,
    input  wire [PORTS*ADDR_WIDTH-1:0]     s_axi_awaddr,
    input  wire [PORTS*8-1:0]              s_axi_awlen,
    input  wire [PORTS*3-1:0]              s_axi_awsize,
    input  wire [PORTS*2-1:0]              s_axi_awburst,
    input  wire [PORTS-1:0]                s_axi_awlock,
    input  wire [PORTS*4-1:0]              s_axi_awcache,
    input  wire [PORTS*3-1:0]              s_axi_awprot,
    input  wire [PORTS-1:0]                s_axi_awvalid,
    output wire [PORTS-1:0]                s_axi_awready,
    input  wire [PORTS*DATA_WIDTH-1:0]     s_axi_wdata,
    input  wire [PORTS*DATA_WIDTH/8-1:0]   s_axi_wstrb,
    input  wire [PORTS-1:0]                s_axi_wlast,
    input  wire [PORTS-1:0]                s_axi_wvalid,
    output wire [PORTS-1:0]                s_axi_wready,
    output wire [PORTS*S_ID_WIDTH-1:0]     s_axi_bid,
    output wire [PORTS*2-1:0]              s_axi_bresp,
    output wire [PORTS-1:0]                s_axi_bvalid,
    input  wire [PORTS-1:0]                s_axi_bready,

    `NIC_AXI_WR_MASTER_PORTS(M_ID_WIDTH, ADDR_WIDTH, DATA_WIDTH),

    output wire                            idle
);

    `NIC_CLOG2_FUNCTION

    localparam PORT_W = clog2(PORTS);
    localparam STRB_W = DATA_WIDTH / 8;
    localparam integer LAST_PORT_I = PORTS - 1;
    localparam [PORT_W-1:0] LAST_PORT = LAST_PORT_I[PORT_W-1:0];
    localparam REQ_W = S_ID_WIDTH + ADDR_WIDTH + 8 + 3 + 2 + 1 + 4 + 3;

    // ---------------------------------------------------------------- AW
    reg              aw_v;
    reg [REQ_W-1:0]  aw_req;
    reg [PORT_W-1:0] aw_port;
    reg [PORT_W-1:0] rr;
    reg              w_lock;     // a W burst is owed by w_owner
    reg [PORT_W-1:0] w_owner;
    reg [CNT_WIDTH-1:0] pending; // AWs accepted by the slave without their B yet

    reg              sel_found;
    reg [PORT_W-1:0] sel;
    integer i;
    integer p;
    always @* begin
        sel_found = 1'b0;
        sel = {PORT_W{1'b0}};
        for (i = 0; i < PORTS; i = i + 1) begin
            p = {{(32-PORT_W){1'b0}}, rr} + i;
            if (p >= PORTS)
                p = p - PORTS;
            if (!sel_found && s_axi_awvalid[p]) begin
                sel_found = 1'b1;
                sel = p[PORT_W-1:0];
            end
        end
    end

    wire aw_free = !aw_v || m_axi_awready;
    wire grant = aw_free && !w_lock && sel_found;
    wire [REQ_W-1:0] sel_req = {s_axi_awid[sel*S_ID_WIDTH +: S_ID_WIDTH],
                                s_axi_awaddr[sel*ADDR_WIDTH +: ADDR_WIDTH],
                                s_axi_awlen[sel*8 +: 8], s_axi_awsize[sel*3 +: 3],
                                s_axi_awburst[sel*2 +: 2], s_axi_awlock[sel],
                                s_axi_awcache[sel*4 +: 4], s_axi_awprot[sel*3 +: 3]};

    wire w_hs = m_axi_wvalid && m_axi_wready;
    wire aw_hs = m_axi_awvalid && m_axi_awready;
    wire b_hs = m_axi_bvalid && m_axi_bready;
    wire [31:0] b_port = {{(32-PORT_W){1'b0}}, m_axi_bid[PORT_W-1:0]};

    genvar g;
    generate
        for (g = 0; g < PORTS; g = g + 1) begin : g_port
            assign s_axi_awready[g] = grant && sel == g;
            assign s_axi_wready[g] = w_lock && w_owner == g && m_axi_wready;
            assign s_axi_bid[g*S_ID_WIDTH +: S_ID_WIDTH] = m_axi_bid[PORT_W +: S_ID_WIDTH];
            assign s_axi_bresp[g*2 +: 2] = m_axi_bresp;
            assign s_axi_bvalid[g] = m_axi_bvalid && m_axi_bid[PORT_W-1:0] == g;
        end
    endgenerate

    always @(posedge clk) begin
        if (grant) begin
            aw_req <= sel_req;
            aw_port <= sel;
            w_owner <= sel;
        end
        if (rst) begin
            aw_v <= 1'b0;
            rr <= {PORT_W{1'b0}};
            w_lock <= 1'b0;
            pending <= {CNT_WIDTH{1'b0}};
        end else begin
            if (grant) begin
                aw_v <= 1'b1;
                rr <= (sel == LAST_PORT) ? {PORT_W{1'b0}} : sel + 1'b1;
            end else if (m_axi_awready) begin
                aw_v <= 1'b0;
            end
            if (grant)
                w_lock <= 1'b1;
            else if (w_hs && m_axi_wlast)
                w_lock <= 1'b0;
            if (aw_hs && !b_hs)
                pending <= pending + 1'b1;
            else if (!aw_hs && b_hs)
                pending <= pending - 1'b1;
        end
    end

    wire [S_ID_WIDTH-1:0] aw_id;
    /* verilator lint_off WIDTHEXPAND */
    wire [M_ID_WIDTH-1:0] aw_mid = {aw_id, aw_port};   // zero-extended
    /* verilator lint_on WIDTHEXPAND */
    assign {aw_id, m_axi_awaddr, m_axi_awlen, m_axi_awsize, m_axi_awburst, m_axi_awlock,
            m_axi_awcache, m_axi_awprot} = aw_req;
    assign m_axi_awid = aw_mid;
    assign m_axi_awvalid = aw_v;

    // ---------------------------------------------------------------- W, B
    assign m_axi_wdata = s_axi_wdata[w_owner*DATA_WIDTH +: DATA_WIDTH];
    assign m_axi_wstrb = s_axi_wstrb[w_owner*STRB_W +: STRB_W];
    assign m_axi_wlast = s_axi_wlast[w_owner];
    assign m_axi_wvalid = w_lock && s_axi_wvalid[w_owner];
    assign m_axi_bready = m_axi_bvalid &&
                          (b_port < PORTS ? s_axi_bready[m_axi_bid[PORT_W-1:0]] : 1'b1);

    assign idle = !(|s_axi_awvalid) && !aw_v && !w_lock && pending == {CNT_WIDTH{1'b0}};

    /* verilator lint_off UNUSEDSIGNAL */
    wire unused = &{1'b0, m_axi_bid};   // ID bits above the port's ID and index
    /* verilator lint_on UNUSEDSIGNAL */

endmodule
`default_nettype wire
