`default_nettype none
`include "nic_common.vh"
// axis_frame_fifo: an AXI-Stream frame FIFO between a design and its Ethernet MAC. A frame
// leaves only once all of it is in (store and forward), so once its first beat is out its
// beats follow back to back: the output never has a tvalid gap inside a frame, which a
// CMAC-class MAC's transmitter treats as an underrun and aborts the frame (Xilinx PG203,
// PG210: tx_axis_tvalid must stay high from the first beat of a packet to its last).
//
// Two modes:
//   DROP_WHEN_FULL = 0 (transmit): s_tready is low while the FIFO is full. A frame longer than
//     the FIFO could never be sent whole; it is dropped (s_tready high until its tlast) and
//     counted in drops, so the FIFO cannot lock up.
//   DROP_WHEN_FULL = 1 (receive): s_tready is always high, as a MAC cannot be held off: a
//     frame that finds no room for one of its beats is dropped whole (the beats already in
//     are given back, the rest are discarded up to its tlast) and counted in drops.
// A frame's tuser (on its last beat) is carried through; dropping bad frames is the reader's
// business.
//
// The output is first-word-fall-through on a RAM with a registered read, as fifo_fwft: the
// head beat is on m_axis_* while m_axis_tvalid is high, one beat per cycle with no bubble.
//
// Parameters:
//   DATA_WIDTH      tdata width (tkeep is DATA_WIDTH/8)
//   DEPTH           beats (a power of two, 4..32768); the longest frame that gets through
//                   has DEPTH beats
//   DROP_WHEN_FULL  see above
//
// Ports:
//   clk, rst        clock, synchronous active-high reset (empties the FIFO)
//   s_axis_*        frames in
//   m_axis_*        frames out, whole
//   drops[31:0]     frames dropped (wraps)
module axis_frame_fifo #(
    parameter DATA_WIDTH = 64,
    parameter DEPTH = 1024,
    parameter DROP_WHEN_FULL = 0
) (
    input  wire                      clk,
    input  wire                      rst,

    `NIC_AXIS_SLAVE_PORTS(DATA_WIDTH, DATA_WIDTH/8),
    input  wire                      s_axis_tuser,

    `NIC_AXIS_MASTER_PORTS(wire, DATA_WIDTH, DATA_WIDTH/8),
    output wire                      m_axis_tuser,

    output reg  [31:0]               drops
);

    `NIC_CLOG2_FUNCTION

    localparam KW = DATA_WIDTH / 8;
    localparam W = DATA_WIDTH + KW + 2;  // tdata, tkeep, tlast, tuser
    localparam AW = clog2(DEPTH);

    reg [W-1:0]  mem [0:DEPTH-1];
    reg [AW:0]   wp;        // next beat's slot (beats of the frame coming in are past wp_c)
    reg [AW:0]   wp_c;      // end of the last whole frame: the reader sees up to here
    reg [AW:0]   rp;
    reg [AW:0]   rp1;       // rp + 1, kept in a register: the next head's address is a mux
    reg [W-1:0]  q;         // the RAM's registered read port
    reg          byp;       // the head was written in the cycle it was read: take it here
    reg [W-1:0]  byp_data;
    reg          dropping;  // the frame coming in is being dropped: discard up to its tlast

    wire full = wp[AW-1:0] == rp[AW-1:0] && wp[AW] != rp[AW];
    // Transmit: a full FIFO that holds no whole frame holds part of one too long for it.
    wire too_long = full && wp_c == rp;
    wire drop_now = DROP_WHEN_FULL ? full : too_long;
    assign s_axis_tready = DROP_WHEN_FULL ? 1'b1 : (!full || too_long || dropping);
    wire beat = s_axis_tvalid && s_axis_tready;
    wire push = beat && !dropping && !drop_now;
    wire empty = wp_c == rp;
    wire pop = !empty && m_axis_tready;
    wire [AW:0] rp_n = pop ? rp1 : rp;
    wire [W-1:0] s_word = {s_axis_tuser, s_axis_tlast, s_axis_tkeep, s_axis_tdata};
    wire unused_wrap = rp_n[AW];  // (the RAM address is the pointer's low bits)

    always @(posedge clk) begin
        if (push)
            mem[wp[AW-1:0]] <= s_word;
        q <= mem[rp_n[AW-1:0]];
        byp <= push && (pop ? wp == rp1 : wp == rp);
        byp_data <= s_word;
    end

    always @(posedge clk) begin
        if (rst) begin
            wp <= {(AW+1){1'b0}};
            wp_c <= {(AW+1){1'b0}};
            rp <= {(AW+1){1'b0}};
            rp1 <= {{AW{1'b0}}, 1'b1};
            dropping <= 1'b0;
            drops <= 32'd0;
        end else begin
            if (pop) begin
                rp <= rp1;
                rp1 <= rp1 + 1'b1;
            end
            if (push) begin
                wp <= wp + 1'b1;
                if (s_axis_tlast)
                    wp_c <= wp + 1'b1;
            end else if (beat && !dropping) begin
                // no room (receive), or a frame too long for the FIFO (transmit): give back
                // the beats it has in, discard the rest
                wp <= wp_c;
                if (s_axis_tlast)
                    drops <= drops + 32'd1;
                else
                    dropping <= 1'b1;
            end else if (beat && s_axis_tlast) begin
                dropping <= 1'b0;
                drops <= drops + 32'd1;
            end
        end
    end

    wire [W-1:0] head = byp ? byp_data : q;
    assign m_axis_tvalid = !empty;
    assign m_axis_tdata = head[DATA_WIDTH-1:0];
    assign m_axis_tkeep = head[DATA_WIDTH +: KW];
    assign m_axis_tlast = head[DATA_WIDTH + KW];
    assign m_axis_tuser = head[DATA_WIDTH + KW + 1];

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXIS_IN("axis_frame_fifo in", DATA_WIDTH, DATA_WIDTH/8, 1)
    `NIC_CHECK_AXIS_OUT("axis_frame_fifo out", DATA_WIDTH, DATA_WIDTH/8, 1)

endmodule
`default_nettype wire
