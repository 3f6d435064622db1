// crc32_roce_icrc: RoCEv2 ICRC accumulation over a packed frame stream (one register stage).
//
// Input: a PACKED AXI-Stream of Ethernet frames, as axis_keep_packer emits: every beat full but
// the last, whose tkeep is contiguous from bit 0, and lanes past tkeep zero (relied upon). Each beat is passed through one register stage unchanged; on the way the
// beat's bytes, with the ICRC's substitutions applied (RoCEv2 Annex A17.4.1, IBA 7.8.1), are
// folded into a CRC-32 register. When the registered beat is the frame's last, m_crc holds the
// CRC register over the whole covered range, without zlib's final inversion:
//   insert mode (CHECK = 0): the covered range is frame bytes 14..end of frame, so
//     ~m_crc is the ICRC to append (= nicsim.wire.compute_icrc);
//   check mode (CHECK = 1): the covered range is bytes 14..(14 + IP length) - 1 including the
//     received ICRC (Ethernet padding after the IP packet is skipped), so m_crc equals the
//     CRC-32 residue 32'hdebb20e3 iff the ICRC is right.
// The pseudo-header of eight 0xff bytes and zlib's initial 32'hffffffff are folded into the
// Ethernet header: with a zero register, bytes 0..9 count as 0x00 and bytes 10..13 as 0xff
// (a register preset to all ones equals four leading 0xff bytes; leading zeros are no-ops).
// Substituted with 0xff: IPv4 TOS (byte 15), TTL (22), header checksum (24, 25);
// IPv6 traffic class and flow label (low nibble of 14, bytes 15..17), hop limit (21);
// UDP checksum (IPv4 40, 41 / IPv6 60, 61); BTH byte 4 (IPv4 46 / IPv6 66).
// IPv4 or IPv6 is decided by the EtherType (0x0800 / 0x86dd); IPv4 headers are assumed to be
// 20 bytes (no options). A partial last beat is zero-filled and the zero bytes are then taken
// back out of the register with crc32_unshift, so there is one full-width CRC matrix only.
//
// Parameters:
//   DATA_WIDTH  tdata width: 64, 128, 256 or 512
//   KEEP_WIDTH  DATA_WIDTH/8
//   CHECK       0: cover the whole frame (insert); 1: cover the IP length, flag errors (check)
// Ports:
//   clk, rst                   clock, synchronous active-high reset
//   s_axis_*                   packed input stream (tuser is carried along unchanged)
//   m_axis_*                   the same beats, one register stage later
//   m_ip                       the frame's EtherType is IPv4 or IPv6 (valid from the beat
//                              holding the EtherType on, in particular with m_axis_tlast)
//   m_bad                      check mode, with m_axis_tlast: the ICRC cannot be right: IPv4
//                              header byte 14 is not 0x45, IPv6 version is not 6, the IP
//                              length is below the smallest RoCEv2 packet, or the frame is
//                              shorter than the IP length says (meaningless if !m_ip)
//   m_crc                      CRC register (see above), valid with m_axis_tlast
//   m_cnt                      bytes in the registered beat (popcount of m_axis_tkeep)
//   s_axis_tready depends combinationally on m_axis_tready.

`default_nettype none
`include "nic_common.vh"

module crc32_roce_icrc #(
    parameter DATA_WIDTH = 64,
    parameter KEEP_WIDTH = DATA_WIDTH/8,
    parameter CHECK = 0
) (
    input  wire                  clk,
    input  wire                  rst,

    `NIC_AXIS_SLAVE_PORTS(DATA_WIDTH, KEEP_WIDTH),
    input  wire                  s_axis_tuser,

    `NIC_AXIS_MASTER_PORTS(reg, DATA_WIDTH, KEEP_WIDTH),
    output reg                   m_axis_tuser,
    output reg                   m_ip,
    output reg                   m_bad,
    output wire [31:0]           m_crc,
    output reg  [6:0]             m_cnt
);

`NIC_CLOG2_FUNCTION

localparam LW   = clog2(KEEP_WIDTH);      // lane index bits
localparam OFFW = 17;                      // frame byte offsets (IP length + headers < 2**17)
localparam BW   = OFFW - LW;               // beat counter bits
localparam [LW:0] KEEP_CNT = KEEP_WIDTH[LW:0];

// Where the fields the ICRC logic reads sit (byte 12..19 never straddle a beat for >= 8 lanes).
localparam integer ET_BEAT   = 12 / KEEP_WIDTH; // EtherType, bytes 12..13; IP byte 14 too
localparam integer ET_LANE   = 12 % KEEP_WIDTH;
localparam integer B14_LANE  = 14 % KEEP_WIDTH;
localparam integer LEN_BEAT  = 16 / KEEP_WIDTH; // IPv4 total length 16..17, IPv6 payload 18..19
localparam integer LEN_LANE  = 16 % KEEP_WIDTH;
localparam integer SUB_BEATS = 66 / KEEP_WIDTH + 1; // beats holding bytes the ICRC substitutes
localparam [BW-1:0] ET_BEAT_B   = ET_BEAT[BW-1:0];
localparam [BW-1:0] LEN_BEAT_B  = LEN_BEAT[BW-1:0];
localparam [BW-1:0] SUB_BEATS_B = SUB_BEATS[BW-1:0];

// Shortest IP packets that can carry RoCEv2 (UDP 8 + BTH 12 + ICRC 4), as end offsets.
localparam [OFFW:0] MIN_END_V4 = 14 + 20 + 8 + 12 + 4;
localparam [OFFW:0] MIN_END_V6 = 14 + 40 + 8 + 12 + 4;

reg [BW-1:0]   beat;       // index of the next beat to load within the frame (saturating)
reg            v4_r, v6_r; // EtherType seen earlier in the frame
reg            bad_r;      // header error seen earlier in the frame
reg            done_r;     // check: the covered range already ended in an earlier beat
reg [OFFW:0]   end_r;      // check: offset just past the IP packet
reg [31:0]     crc_r;      // running CRC register of the frame
reg [31:0]     fin_crc_r;  // CRC register after the final covered beat (zero-filled)
reg [LW-1:0]   fin_zero_r; // zero bytes past the covered range in that beat

assign s_axis_tready = !m_axis_tvalid || m_axis_tready;
wire load = s_axis_tvalid && s_axis_tready;

// Bits of the first SUB_BEATS beats that the ICRC replaces: kind 0 gives the bits forced to
// 0 (bytes 0..9), kind 1 (IPv4) and kind 2 (IPv6) the bits forced to 1 (bytes 10..13 and the
// variant fields). Constant vectors, so the per-beat work is a few whole-vector operations.
function [SUB_BEATS*DATA_WIDTH-1:0] sub_mask;
    input integer kind;
    integer n;
    begin
        sub_mask = {(SUB_BEATS*DATA_WIDTH){1'b0}};
        for (n = 0; n < SUB_BEATS*KEEP_WIDTH; n = n + 1) begin
            if (kind == 0 && n < 10)
                sub_mask[8*n +: 8] = 8'hff;
            if (kind != 0 && n >= 10 && n < 14)
                sub_mask[8*n +: 8] = 8'hff;
            if (kind == 1 && (n == 15 || n == 22 || n == 24 || n == 25 || n == 40 || n == 41 ||
                              n == 46))
                sub_mask[8*n +: 8] = 8'hff;
            if (kind == 2 && n == 14)
                sub_mask[8*n +: 8] = 8'h0f;
            if (kind == 2 && (n == 15 || n == 16 || n == 17 || n == 21 || n == 60 || n == 61 ||
                              n == 66))
                sub_mask[8*n +: 8] = 8'hff;
        end
    end
endfunction

localparam [SUB_BEATS*DATA_WIDTH-1:0] SUB_ZERO   = sub_mask(0);
localparam [SUB_BEATS*DATA_WIDTH-1:0] SUB_ONE_V4 = sub_mask(1);
localparam [SUB_BEATS*DATA_WIDTH-1:0] SUB_ONE_V6 = sub_mask(2);

// ---- per-beat combinational view of the input beat ----
reg [15:0]         ethertype;
reg [7:0]          b14;
reg                cur_v4, cur_v6, cur_bad;
reg [OFFW:0]       cur_end;
reg [OFFW-1:0]     off;         // frame offset of lane 0
reg [OFFW+1:0]     rem;         // cur_end - off, two's complement
reg                rem_neg;
reg                final_beat;  // the covered range ends in this beat
reg [6:0]          in_cnt;      // bytes in the beat (tkeep is packed; KEEP_WIDTH <= 64)
reg [LW:0]         covered;     // covered bytes in the beat
integer i, cnt;

always @* begin
    ethertype = {s_axis_tdata[8*ET_LANE +: 8], s_axis_tdata[8*(ET_LANE+1) +: 8]};
    b14 = s_axis_tdata[8*B14_LANE +: 8];
    if (beat == ET_BEAT_B) begin
        cur_v4 = s_axis_tkeep[ET_LANE+1] && ethertype == 16'h0800;
        cur_v6 = s_axis_tkeep[ET_LANE+1] && ethertype == 16'h86dd;
    end else begin
        cur_v4 = v4_r;
        cur_v6 = v6_r;
    end

    cur_bad = bad_r;
    cur_end = end_r;
    if (CHECK != 0) begin
        if (beat == ET_BEAT_B && ((cur_v4 && b14 != 8'h45) || (cur_v6 && b14[7:4] != 4'h6)))
            cur_bad = 1'b1;
        if (beat == LEN_BEAT_B) begin
            if (cur_v6)
                cur_end = {2'b00, s_axis_tdata[8*(LEN_LANE+2) +: 8],
                           s_axis_tdata[8*(LEN_LANE+3) +: 8]} + 18'd54;   // 14 + 40
            else
                cur_end = {2'b00, s_axis_tdata[8*LEN_LANE +: 8],
                           s_axis_tdata[8*(LEN_LANE+1) +: 8]} + 18'd14;
            if (cur_end < (cur_v6 ? MIN_END_V6 : MIN_END_V4))
                cur_bad = 1'b1;
        end
    end

    off = {beat, {LW{1'b0}}};
    rem = {1'b0, cur_end} - {2'b00, off};
    rem_neg = rem[OFFW+1];

    // popcount of a packed tkeep: binary search for its length
    cnt = 0;
    for (i = LW; i >= 0; i = i - 1) begin
        if (cnt + (1 << i) <= KEEP_WIDTH && s_axis_tkeep[cnt + (1 << i) - 1])
            cnt = cnt + (1 << i);
    end
    in_cnt = cnt[6:0];

    if (CHECK != 0) begin
        final_beat = !done_r && (rem_neg || rem <= {{(OFFW+1-LW){1'b0}}, KEEP_CNT});
        if (rem_neg)
            covered = {(LW+1){1'b0}};
        else if (rem < {{(OFFW+2-7){1'b0}}, in_cnt})
            covered = rem[LW:0];
        else
            covered = in_cnt[LW:0];
    end else begin
        final_beat = s_axis_tlast;
        covered = in_cnt[LW:0];
    end
end

// The beat as the CRC sees it: substituted fields, and zeros past the covered bytes (the
// packer already zeroes lanes past tkeep; check mode also cuts off Ethernet padding).
wire [DATA_WIDTH-1:0] cover_bits = ~({DATA_WIDTH{1'b1}} << {covered, 3'b000});
reg  [DATA_WIDTH-1:0] sub_zero, sub_one;

always @* begin
    sub_zero = {DATA_WIDTH{1'b0}};
    sub_one  = {DATA_WIDTH{1'b0}};
    if (beat < SUB_BEATS_B) begin
        sub_zero = SUB_ZERO[beat*DATA_WIDTH +: DATA_WIDTH];
        sub_one  = cur_v6 ? SUB_ONE_V6[beat*DATA_WIDTH +: DATA_WIDTH]
                          : SUB_ONE_V4[beat*DATA_WIDTH +: DATA_WIDTH];
    end
end

wire [DATA_WIDTH-1:0] crc_bytes = ((s_axis_tdata & ~sub_zero) | sub_one) & cover_bits;

wire [31:0] crc_in = (beat == 0) ? 32'd0 : crc_r;
wire [31:0] crc_next;

crc32_beat #(
    .DATA_BYTES(KEEP_WIDTH)
) u_beat (
    .state_in(crc_in),
    .data_in(crc_bytes),
    .state_out(crc_next)
);

crc32_unshift #(
    .SHIFT_WIDTH(LW)
) u_unshift (
    .state_in(fin_crc_r),
    .shift(fin_zero_r),
    .state_out(m_crc)
);

// KEEP_WIDTH - covered, modulo KEEP_WIDTH (covered = 1..KEEP_WIDTH in a final beat).
wire [LW-1:0] zero_bytes = {LW{1'b0}} - covered[LW-1:0];
wire [OFFW:0] frame_len = {1'b0, off} + {{(OFFW+1-7){1'b0}}, in_cnt};

always @(posedge clk) begin
    if (s_axis_tready)
        m_axis_tvalid <= s_axis_tvalid;

    if (load) begin
        m_axis_tdata <= s_axis_tdata;
        m_axis_tkeep <= s_axis_tkeep;
        m_axis_tlast <= s_axis_tlast;
        m_axis_tuser <= s_axis_tuser;
        m_ip         <= cur_v4 || cur_v6;
        m_cnt        <= in_cnt;
        m_bad        <= (CHECK != 0) && (cur_bad || (s_axis_tlast &&
                        (frame_len < cur_end || !(done_r || final_beat))));

        if (CHECK == 0 || !done_r)
            crc_r <= crc_next;
        // Captured once per frame, so the unshift logic sees new operands only then.
        if (final_beat) begin
            fin_crc_r  <= crc_next;
            fin_zero_r <= zero_bytes;
        end

        if (s_axis_tlast) begin
            beat   <= {BW{1'b0}};
            v4_r   <= 1'b0;
            v6_r   <= 1'b0;
            bad_r  <= 1'b0;
            done_r <= 1'b0;
            end_r  <= {(OFFW+1){1'b1}};
        end else begin
            if (beat != {BW{1'b1}})
                beat <= beat + 1'b1;
            v4_r   <= cur_v4;
            v6_r   <= cur_v6;
            bad_r  <= cur_bad;
            done_r <= done_r || ((CHECK != 0) && final_beat);
            end_r  <= cur_end;
        end
    end

    if (rst) begin
        m_axis_tvalid <= 1'b0;
        beat   <= {BW{1'b0}};
        v4_r   <= 1'b0;
        v6_r   <= 1'b0;
        bad_r  <= 1'b0;
        done_r <= 1'b0;
        end_r  <= {(OFFW+1){1'b1}};
        crc_r      <= 32'd0;
        fin_crc_r  <= 32'd0;
        fin_zero_r <= {LW{1'b0}};
    end
end

endmodule

`default_nettype wire
