`default_nettype none
`include "nic_common.vh"
// fifo_fwft: synchronous first-word-fall-through FIFO on a RAM with a registered read (block
// RAM or distributed RAM; one write port, one read port).
//
// The head entry is always present on m_data while m_valid is high; a pop (m_valid & m_ready)
// shows the next entry in the next cycle, so the FIFO moves one entry per cycle with no bubble.
// The RAM is read every cycle at the address of the entry that will be the head next cycle;
// when that entry is being written in the same cycle (the FIFO is, or is about to be, empty)
// the written data is taken from a bypass register instead, so a push is visible on m_data one
// cycle later. (The bypass sits after the RAM's read register, so the RAM infers as block RAM.)
//
// Parameters:
//   WIDTH   entry width in bits
//   DEPTH   entries (a power of two, 2..32768)
//
// Ports:
//   clk, rst                 clock, synchronous active-high reset (empties the FIFO)
//   s_data, s_valid, s_ready push side (s_ready = not full)
//   m_data, m_valid, m_ready pop side (m_valid = not empty)
//   count                    entries held (0..DEPTH)
module fifo_fwft #(
    parameter WIDTH = 8,
    parameter DEPTH = 16
) (
    input  wire             clk,
    input  wire             rst,

    input  wire [WIDTH-1:0] s_data,
    input  wire             s_valid,
    output wire             s_ready,

    output wire [WIDTH-1:0] m_data,
    output wire             m_valid,
    input  wire             m_ready,

    output wire [15:0]      count
);

    `NIC_CLOG2_FUNCTION

    localparam AW = clog2(DEPTH);

    reg [WIDTH-1:0] mem [0:DEPTH-1];
    reg [AW:0]      wp;
    reg [AW:0]      rp;
    reg [WIDTH-1:0] q;          // the RAM's registered read port
    reg             byp;        // the head was written in the cycle it was read: take it here
    reg [WIDTH-1:0] byp_data;

    wire empty = wp == rp;
    wire full = wp[AW-1:0] == rp[AW-1:0] && wp[AW] != rp[AW];
    wire push = s_valid && !full;
    wire pop = !empty && m_ready;
    wire [AW:0] rp_n = rp + {{AW{1'b0}}, pop};

    always @(posedge clk) begin
        if (push)
            mem[wp[AW-1:0]] <= s_data;
        q <= mem[rp_n[AW-1:0]];
        byp <= push && wp == rp_n;
        byp_data <= s_data;
    end

    always @(posedge clk) begin
        if (rst) begin
            wp <= {(AW+1){1'b0}};
            rp <= {(AW+1){1'b0}};
        end else begin
            if (push)
                wp <= wp + 1'b1;
            rp <= rp_n;
        end
    end

    assign s_ready = !full;
    assign m_valid = !empty;
    assign m_data = byp ? byp_data : q;
    wire [AW:0] used = wp - rp;
    assign count = {{(15-AW){1'b0}}, used};

endmodule
`default_nettype wire
