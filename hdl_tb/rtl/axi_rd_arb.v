`default_nettype none
`include "nic_common.vh"
// axi_rd_arb: PORTS AXI4 read masters share one AXI4 read master port.
//
// AR: round-robin among the ports with ARVALID, one request per cycle, through a registered
// AR stage (the shared ARVALID/ARADDR never change while waiting for ARREADY). The request
// leaves with ARID = {port's ARID, port index}: the port index in the low PORT_W bits, so each
// port is its own ID (or IDs) and the slave may return the ports' data in any order and
// interleaved, beat by beat (AXI4 A5.3: ordering only within one ID).
// R: every beat goes to the port named by RID's low bits, with RID shifted back to the port's
// own ID; RREADY comes from that port while RVALID is high (combinational: ready and valid to
// ready). RDATA is shared.
// A port's own ID ordering is kept (same ID in, same ID out). RID values naming no port
// (index >= PORTS) are accepted and dropped.
//
// Parameters:
//   PORTS       read masters (>= 2)
//   DATA_WIDTH  AXI data width
//   ADDR_WIDTH  AXI address width
//   S_ID_WIDTH  ID width of each port
//   M_ID_WIDTH  ID width of the shared port (>= S_ID_WIDTH + clog2(PORTS))
//
// Ports:
//   clk, rst                      clock, synchronous active-high reset
//   s_axi_ar*, s_axi_r*           the ports, flattened: port p's field at [p*W +: W]
//                                 (RDATA is broadcast to all ports: [p*DATA_WIDTH +: ...])
//   m_axi_ar*, m_axi_r*           the shared AXI4 read master
module axi_rd_arb #(
    parameter PORTS = 2,
    parameter DATA_WIDTH = 64,
    parameter ADDR_WIDTH = 64,
    parameter S_ID_WIDTH = 4,
    parameter M_ID_WIDTH = 5
) (
    input  wire                          clk,
    input  wire                          rst,

    input  wire [PORTS*S_ID_WIDTH-1:0]   s_axi_arid,
    input  wire [PORTS*ADDR_WIDTH-1:0]   s_axi_araddr,
    input  wire [PORTS*8-1:0]            s_axi_arlen,
    input  wire [PORTS*3-1:0]            s_axi_arsize,
    input  wire [PORTS*2-1:0]            s_axi_arburst,
    input  wire [PORTS-1:0]              s_axi_arlock,
    input  wire [PORTS*4-1:0]            s_axi_arcache,
    input  wire [PORTS*3-1:0]            s_axi_arprot,
    input  wire [PORTS-1:0]              s_axi_arvalid,
    output wire [PORTS-1:0]              s_axi_arready,
    output wire [PORTS*S_ID_WIDTH-1:0]   s_axi_rid,
    output wire [PORTS*DATA_WIDTH-1:0]   s_axi_rdata,
    output wire [PORTS*2-1:0]            s_axi_rresp,
    output wire [PORTS-1:0]              s_axi_rlast,
    output wire [PORTS-1:0]              s_axi_rvalid,
    input  wire [PORTS-1:0]              s_axi_rready,

    `NIC_AXI_RD_MASTER_PORTS(M_ID_WIDTH, ADDR_WIDTH, DATA_WIDTH)
);

    `NIC_CLOG2_FUNCTION

    localparam PORT_W = clog2(PORTS);
    localparam integer LAST_PORT_I = PORTS - 1;
    localparam [PORT_W-1:0] LAST_PORT = LAST_PORT_I[PORT_W-1:0];
    // the registered request: {id, addr, len, size, burst, lock, cache, prot}
    localparam REQ_W = S_ID_WIDTH + ADDR_WIDTH + 8 + 3 + 2 + 1 + 4 + 3;

    // ---------------------------------------------------------------- AR
    reg              ar_v;
    reg [REQ_W-1:0]  ar_req;
    reg [PORT_W-1:0] ar_port;
    reg [PORT_W-1:0] rr;

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
            if (!sel_found && s_axi_arvalid[p]) begin
                sel_found = 1'b1;
                sel = p[PORT_W-1:0];
            end
        end
    end

    wire ar_free = !ar_v || m_axi_arready;
    wire grant = ar_free && sel_found;
    wire [REQ_W-1:0] sel_req = {s_axi_arid[sel*S_ID_WIDTH +: S_ID_WIDTH],
                                s_axi_araddr[sel*ADDR_WIDTH +: ADDR_WIDTH],
                                s_axi_arlen[sel*8 +: 8], s_axi_arsize[sel*3 +: 3],
                                s_axi_arburst[sel*2 +: 2], s_axi_arlock[sel],
                                s_axi_arcache[sel*4 +: 4], s_axi_arprot[sel*3 +: 3]};

    genvar g;
    generate
        for (g = 0; g < PORTS; g = g + 1) begin : g_port
            assign s_axi_arready[g] = grant && sel == g;
            assign s_axi_rid[g*S_ID_WIDTH +: S_ID_WIDTH] = m_axi_rid[PORT_W +: S_ID_WIDTH];
            assign s_axi_rdata[g*DATA_WIDTH +: DATA_WIDTH] = m_axi_rdata;
            assign s_axi_rresp[g*2 +: 2] = m_axi_rresp;
            assign s_axi_rlast[g] = m_axi_rlast;
            assign s_axi_rvalid[g] = m_axi_rvalid && m_axi_rid[PORT_W-1:0] == g;
        end
    endgenerate

    always @(posedge clk) begin
        if (grant) begin
            ar_req <= sel_req;
            ar_port <= sel;
        end
        if (rst) begin
            ar_v <= 1'b0;
            rr <= {PORT_W{1'b0}};
        end else if (grant) begin
            ar_v <= 1'b1;
            rr <= (sel == LAST_PORT) ? {PORT_W{1'b0}} : sel + 1'b1;
        end else if (m_axi_arready) begin
            ar_v <= 1'b0;
        end
    end

    wire [S_ID_WIDTH-1:0] ar_id;
    assign {ar_id, m_axi_araddr, m_axi_arlen, m_axi_arsize, m_axi_arburst, m_axi_arlock,
            m_axi_arcache, m_axi_arprot} = ar_req;
    /* verilator lint_off WIDTHEXPAND */
    wire [M_ID_WIDTH-1:0] ar_mid = {ar_id, ar_port};   // zero-extended
    /* verilator lint_on WIDTHEXPAND */
    assign m_axi_arid = ar_mid;
    assign m_axi_arvalid = ar_v;

    // ---------------------------------------------------------------- R
    wire [31:0] r_port = {{(32-PORT_W){1'b0}}, m_axi_rid[PORT_W-1:0]};
    assign m_axi_rready = m_axi_rvalid &&
                          (r_port < PORTS ? s_axi_rready[m_axi_rid[PORT_W-1:0]] : 1'b1);

    /* verilator lint_off UNUSEDSIGNAL */
    wire unused = &{1'b0, m_axi_rid};   // ID bits above the port's ID and index
    /* verilator lint_on UNUSEDSIGNAL */

endmodule
`default_nettype wire
