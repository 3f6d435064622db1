// axis_keep_packer: turn an AXI-Stream with any tkeep pattern into a packed stream.
//
// The input may carry null bytes (tkeep = 0) anywhere, including whole null beats and a null
// last beat. The output carries the same bytes in the same order, packed: every beat full
// except the last of a packet, whose tkeep is contiguous from bit 0 (lanes past it are zero).
// A packet with no bytes at all is dropped. tuser is taken from the input's last beat (the
// tlast beat) and put on the output's last beat; other output beats carry tuser = 0.
//
// Structure: each input beat is compacted (byte i moves down by the number of null lanes
// below it, log2 stages, shift bits taken least significant first, which never collides) into
// a register stage; the next stage rotates it up past the bytes already pending and merges it
// with them. A full beat is emitted only once more bytes are known to follow it, so a
// packet's final beat always leaves from the pending buffer, one cycle after its tlast beat
// left the compaction stage, while the next packet's first beat enters the emptied buffer. A
// packed input stream therefore flows at one beat per cycle with no bubble between packets;
// latency is two beats plus the output register. The two stages are apart so that each fits
// one cycle at 156.25 MHz on an ECP5 at 64 bits (benchmarks/rtl_timing.py); the merge keeps
// the base it merges onto (count and bytes) in registers of its own for the same reason.
//
// Parameters:
//   DATA_WIDTH  tdata width in bits, a power of two >= 16
//   KEEP_WIDTH  tkeep width, DATA_WIDTH/8
//   USER_WIDTH  tuser width
// Ports:
//   clk, rst            clock, synchronous active-high reset
//   s_axis_tdata/tkeep/tvalid/tready/tlast/tuser  input stream (any tkeep)
//   m_axis_tdata/tkeep/tvalid/tready/tlast/tuser  output stream (packed)
//   s_axis_tready depends combinationally on m_axis_tready (= !m_axis_tvalid || m_axis_tready).

`default_nettype none
`include "nic_common.vh"

module axis_keep_packer #(
    parameter DATA_WIDTH = 64,
    parameter KEEP_WIDTH = DATA_WIDTH/8,
    parameter USER_WIDTH = 1
) (
    input  wire                  clk,
    input  wire                  rst,

    `NIC_AXIS_SLAVE_PORTS(DATA_WIDTH, KEEP_WIDTH),
    input  wire [USER_WIDTH-1:0] s_axis_tuser,

    `NIC_AXIS_MASTER_PORTS(reg, DATA_WIDTH, KEEP_WIDTH),
    output reg  [USER_WIDTH-1:0] m_axis_tuser
);

`NIC_CLOG2_FUNCTION

// Lane index bits; byte counts 0..KEEP_WIDTH need LW+1 bits.
localparam LW = clog2(KEEP_WIDTH);
localparam [LW:0] KEEP_CNT = KEEP_WIDTH[LW:0];

// Lanes [cnt-1:0] set (cnt = 0..KEEP_WIDTH).
function [KEEP_WIDTH-1:0] thermo;
    input [LW:0] cnt;
    begin
        thermo = ~({KEEP_WIDTH{1'b1}} << cnt);
    end
endfunction

// One bit set at the bottom of every byte lane.
localparam [DATA_WIDTH-1:0] LANE_LSB = {KEEP_WIDTH{8'h01}};

// Pending bytes (lanes below pend_cnt, higher lanes zero) of the packet being assembled.
reg [DATA_WIDTH-1:0] pend_data;
reg [LW:0]           pend_cnt;
reg                  pend_last;   // pend_data ends its packet: flush it next
reg [USER_WIDTH-1:0] pend_user;
// What the next beat is merged onto: the pending bytes, or nothing after a flush (pend_last).
// Kept in registers of their own (set with pend_*) so the merge starts from flip-flops.
reg [DATA_WIDTH-1:0] base_data;   // pend_last ? 0 : pend_data
reg [LW:0]           base_cnt;    // pend_last ? 0 : pend_cnt
reg [LW:0]           base_room;   // KEEP_WIDTH - base_cnt

wire out_free = !m_axis_tvalid || m_axis_tready;
assign s_axis_tready = out_free;

// ---- compaction of the input beat (stage 1) ----
// Per-lane quantities are kept one byte per lane, so that each compaction stage is a handful
// of whole-vector operations (cheap to simulate) rather than a loop over lanes.
reg [LW:0]           zeros;
reg [DATA_WIDTH-1:0] keep_bits;   // lane i: 8'hff if tkeep[i]
reg [DATA_WIDTH-1:0] below;       // lane i: null lanes below lane i (< 64, fits a byte)
integer i, s;

always @* begin
    zeros = {(LW+1){1'b0}};
    for (i = 0; i < KEEP_WIDTH; i = i + 1) begin
        keep_bits[8*i +: 8] = {8{s_axis_tkeep[i]}};
        below[8*i +: 8] = {{(7-LW){1'b0}}, zeros};
        zeros = zeros + {{LW{1'b0}}, !s_axis_tkeep[i]};
    end
end

wire [LW:0] in_cnt = KEEP_CNT - zeros;

reg [DATA_WIDTH-1:0] cd, cv, cz;  // data, lane-valid bytes, remaining shift per lane
reg [DATA_WIDTH-1:0] shift_bit;   // lane i: 8'hff if bit s of its shift is set
reg [DATA_WIDTH-1:0] move_in;     // lane i: 8'hff if lane i + 2**s moves down onto it

// A lane whose byte moves away keeps a stale copy (cv says it is empty); only valid lanes
// move, and the final AND with cv clears the stale ones. So each stage is one 2:1 mux.
always @* begin
    cd = s_axis_tdata;
    cv = keep_bits;
    cz = below;
    for (s = 0; s < LW; s = s + 1) begin
        shift_bit = (cz >> s) & LANE_LSB;
        shift_bit = shift_bit | (shift_bit << 1) | (shift_bit << 2) | (shift_bit << 3) |
                    (shift_bit << 4) | (shift_bit << 5) | (shift_bit << 6) | (shift_bit << 7);
        move_in = (cv & shift_bit) >> (8 << s);
        cd = (cd & ~move_in) | ((cd >> (8 << s)) & move_in);
        cz = (cz & ~move_in) | ((cz >> (8 << s)) & move_in);
        cv = (cv & ~shift_bit) | move_in;
    end
end

// The compacted beat: c_cnt bytes from lane 0, zeros above.
reg                  c_valid, c_last;
reg [USER_WIDTH-1:0] c_user;
reg [DATA_WIDTH-1:0] c_data;
reg [LW:0]           c_cnt;
reg [KEEP_WIDTH-1:0] c_keep;      // thermo(c_cnt)

always @(posedge clk) begin
    if (out_free) begin
        c_valid <= s_axis_tvalid;
        c_data  <= cd & cv;
        c_cnt   <= in_cnt;
        for (i = 0; i < KEEP_WIDTH; i = i + 1)
            c_keep[i] <= cv[8*i];
        c_last  <= s_axis_tlast;
        c_user  <= s_axis_tuser;
    end
    if (rst)
        c_valid <= 1'b0;
end

// ---- merge with the pending bytes (stage 2) ----
// After a flush the buffer is empty, so a new packet's bytes start at lane 0.
wire [LW+1:0]         total    = {1'b0, base_cnt} + {1'b0, c_cnt};
wire [DATA_WIDTH-1:0] base_bits = ~({DATA_WIDTH{1'b1}} << {base_cnt, 3'b000});
reg  [DATA_WIDTH-1:0] rot;      // c_data rotated up by base_cnt lanes (mod KEEP_WIDTH)

always @* begin
    rot = c_data;
    for (s = 0; s < LW; s = s + 1) begin
        if (base_cnt[s])
            rot = (rot << (8 << s)) | (rot >> (DATA_WIDTH - (8 << s)));
    end
end

wire [DATA_WIDTH-1:0] lower = base_data | (rot & ~base_bits);
wire [DATA_WIDTH-1:0] upper = rot & base_bits;
// total > KEEP_WIDTH, i.e. c_cnt > base_room: bit base_room of c_cnt's thermometer code, a
// small mux rather than an add and a compare in series (the select fans out to every lane).
wire                  spill = base_room < KEEP_CNT && c_keep[base_room[LW-1:0]];
// total - KEEP_WIDTH when spill (total in KEEP_WIDTH+1 .. 2*KEEP_WIDTH): wiring, no subtract
wire [LW:0]           rest  = {total[LW+1], total[LW-1:0]};

always @(posedge clk) begin
    if (out_free) begin
        m_axis_tvalid <= 1'b0;
        if (pend_last) begin
            if (pend_cnt != 0) begin
                m_axis_tvalid <= 1'b1;
                m_axis_tdata  <= pend_data;
                m_axis_tkeep  <= thermo(pend_cnt);
                m_axis_tlast  <= 1'b1;
                m_axis_tuser  <= pend_user;
            end
            pend_last <= 1'b0;
            pend_cnt  <= {(LW+1){1'b0}};
            pend_data <= {DATA_WIDTH{1'b0}};
            base_cnt  <= {(LW+1){1'b0}};
            base_room <= KEEP_CNT;
            base_data <= {DATA_WIDTH{1'b0}};
        end
        if (c_valid) begin
            if (spill) begin
                // more bytes follow the first KEEP_WIDTH: emit them as a full beat
                m_axis_tvalid <= 1'b1;
                m_axis_tdata  <= lower;
                m_axis_tkeep  <= {KEEP_WIDTH{1'b1}};
                m_axis_tlast  <= 1'b0;
                m_axis_tuser  <= {USER_WIDTH{1'b0}};
                pend_data     <= upper;
                pend_cnt      <= rest;
                base_data     <= c_last ? {DATA_WIDTH{1'b0}} : upper;
                base_cnt      <= c_last ? {(LW+1){1'b0}} : rest;
                base_room     <= c_last ? KEEP_CNT : KEEP_CNT - rest;
            end else begin
                pend_data     <= lower;
                pend_cnt      <= total[LW:0];
                base_data     <= c_last ? {DATA_WIDTH{1'b0}} : lower;
                base_cnt      <= c_last ? {(LW+1){1'b0}} : total[LW:0];
                base_room     <= c_last ? KEEP_CNT : KEEP_CNT - total[LW:0];
            end
            pend_last <= c_last;
            pend_user <= c_user;
        end
    end

    if (rst) begin
        m_axis_tvalid <= 1'b0;
        pend_last     <= 1'b0;
        pend_cnt      <= {(LW+1){1'b0}};
        pend_data     <= {DATA_WIDTH{1'b0}};
        base_cnt      <= {(LW+1){1'b0}};
        base_room     <= KEEP_CNT;
        base_data     <= {DATA_WIDTH{1'b0}};
    end
end

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXIS_IN("axis_keep_packer in", DATA_WIDTH, KEEP_WIDTH, 0)
    `NIC_CHECK_AXIS_OUT("axis_keep_packer out", DATA_WIDTH, KEEP_WIDTH, 1)

endmodule

`default_nettype wire
