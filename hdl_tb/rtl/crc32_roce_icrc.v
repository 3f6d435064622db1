// crc32_roce_icrc: RoCEv2 ICRC accumulation over a packed frame stream (a 5 + log2(KEEP_WIDTH)
// stage pipeline, one beat per cycle).
//
// Input: a PACKED AXI-Stream of Ethernet frames, as axis_keep_packer emits: every beat full but
// the last, whose tkeep is contiguous from bit 0, and lanes past tkeep zero (relied upon). Each
// beat is passed through the pipeline unchanged; on the way the beat's bytes, with the ICRC's
// substitutions applied (RoCEv2 Annex A17.4.1, IBA 7.8.1), are folded into a CRC-32 register.
// When the beat on m_axis is the frame's last, m_crc holds the CRC register over the whole
// covered range, without zlib's final inversion:
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
// Pipeline (each stage a register; the whole pipeline advances together when m_axis is free,
// so it carries one beat per cycle with no bubble). Each stage holds what one clock at
// 156.25 MHz on an ECP5 can do (benchmarks/rtl_timing.py measures it):
//   S1  header fields of the beat: EtherType, IP version byte, IP length -> end of the covered
//       range, bytes in the beat
//   S2  where the covered range ends: covered bytes, final beat, zero bytes to take back out,
//       the check-mode errors
//   S3  the bytes the CRC sees: substitutions and zeros past the covered bytes
//   S4  the data's share of the CRC: the data matrix over the beat (no state in it)
//   S5  the CRC register: the state matrix over the register, XOR the data's share; the
//       register after the final covered beat is kept
//   U0..U(LW-1)  the zero bytes taken back out of that register, one bit of their count per
//       stage; the last is the output
// The recurrence (S5) is then the state matrix alone: at 64 bits each register bit is the
// parity of at most 32 register bits. Latency: 5 + log2(KEEP_WIDTH) cycles.
//
// Parameters:
//   DATA_WIDTH  tdata width: 64, 128, 256 or 512
//   KEEP_WIDTH  DATA_WIDTH/8
//   CHECK       0: cover the whole frame (insert); 1: cover the IP length, flag errors (check)
// Ports:
//   clk, rst                   clock, synchronous active-high reset
//   s_axis_*                   packed input stream (tuser is carried along unchanged)
//   m_axis_*                   the same beats, 5 + log2(KEEP_WIDTH) cycles later
//   m_ip                       the frame's EtherType is IPv4 or IPv6 (valid from the beat
//                              holding the EtherType on, in particular with m_axis_tlast)
//   m_bad                      check mode, with m_axis_tlast: the ICRC cannot be right: IPv4
//                              header byte 14 is not 0x45, IPv6 version is not 6, the IP
//                              length is below the smallest RoCEv2 packet, or the frame is
//                              shorter than the IP length says (meaningless if !m_ip)
//   m_crc                      CRC register (see above), valid with m_axis_tlast
//   m_cnt                      bytes in the beat on m_axis (popcount of m_axis_tkeep)
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

    `NIC_AXIS_MASTER_PORTS(wire, DATA_WIDTH, KEEP_WIDTH),
    output wire                  m_axis_tuser,
    output wire                  m_ip,
    output wire                  m_bad,
    output wire [31:0]           m_crc,
    output wire [6:0]            m_cnt
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

// What a beat carries from S2 to the output unchanged: tdata, tkeep, tlast, tuser, ip, bad, cnt.
localparam PW = DATA_WIDTH + KEEP_WIDTH + 11;
localparam P_LAST = 10;   // tlast's bit in it

// The whole pipeline moves together: a beat leaves the last stage whenever the next one does.
wire adv = !m_axis_tvalid || m_axis_tready;
assign s_axis_tready = adv;
wire load = s_axis_tvalid && adv;

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

// ================================================================ S1: header fields
reg [BW-1:0]   beat;       // index of the next beat to load within the frame (saturating)
reg            v4_r, v6_r; // EtherType seen earlier in the frame
reg            bad_r;      // header error seen earlier in the frame
reg [OFFW:0]   end_r;      // check: offset just past the IP packet

reg [15:0]     ethertype;
reg [7:0]      b14;
reg            cur_v4, cur_v6, cur_bad, len_v6;
reg [15:0]     len4, len6;  // IPv4 total length, IPv6 payload length (if in this beat)
reg [OFFW:0]   cur_end;
reg [6:0]      in_cnt;      // bytes in the beat (tkeep is packed; KEEP_WIDTH <= 64)
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

    // The IP version in the length's beat: when the EtherType came in an earlier beat (64 to
    // 128 bits), the registered one, which keeps the EtherType decode off the length's path.
    len_v6 = (ET_BEAT == LEN_BEAT) ? cur_v6 : v6_r;
    len4 = {s_axis_tdata[8*LEN_LANE +: 8], s_axis_tdata[8*(LEN_LANE+1) +: 8]};
    len6 = {s_axis_tdata[8*(LEN_LANE+2) +: 8], s_axis_tdata[8*(LEN_LANE+3) +: 8]};
    cur_bad = bad_r;
    cur_end = end_r;
    if (CHECK != 0) begin
        if (beat == ET_BEAT_B && ((cur_v4 && b14 != 8'h45) || (cur_v6 && b14[7:4] != 4'h6)))
            cur_bad = 1'b1;
        if (beat == LEN_BEAT_B) begin
            if (len_v6)
                cur_end = {2'b00, len6} + 18'd54;   // 14 + 40
            else
                cur_end = {2'b00, len4} + 18'd14;
            // cur_end below the shortest RoCEv2 packet's end, tested on the length field
            // itself so that the test does not wait for the sum
            if (len_v6 ? len6 < MIN_END_V6[15:0] - 16'd54 : len4 < MIN_END_V4[15:0] - 16'd14)
                cur_bad = 1'b1;
        end
    end

    // popcount of a packed tkeep: binary search for its length
    cnt = 0;
    for (i = LW; i >= 0; i = i - 1) begin
        if (cnt + (1 << i) <= KEEP_WIDTH && s_axis_tkeep[cnt + (1 << i) - 1])
            cnt = cnt + (1 << i);
    end
    in_cnt = cnt[6:0];
end

reg                  s1_v, s1_last, s1_user, s1_v4, s1_v6, s1_bad;
reg [DATA_WIDTH-1:0] s1_data;
reg [KEEP_WIDTH-1:0] s1_keep;
reg [BW-1:0]         s1_beat;
reg [OFFW:0]         s1_end;
reg [6:0]            s1_cnt;

always @(posedge clk) begin
    if (adv) begin
        s1_v    <= s_axis_tvalid;
        s1_data <= s_axis_tdata;
        s1_keep <= s_axis_tkeep;
        s1_last <= s_axis_tlast;
        s1_user <= s_axis_tuser;
        s1_v4   <= cur_v4;
        s1_v6   <= cur_v6;
        s1_bad  <= cur_bad;
        s1_end  <= cur_end;
        s1_cnt  <= in_cnt;
        s1_beat <= beat;
    end
    if (load) begin
        if (s_axis_tlast) begin
            beat  <= {BW{1'b0}};
            v4_r  <= 1'b0;
            v6_r  <= 1'b0;
            bad_r <= 1'b0;
            end_r <= {(OFFW+1){1'b1}};
        end else begin
            if (beat != {BW{1'b1}})
                beat <= beat + 1'b1;
            v4_r  <= cur_v4;
            v6_r  <= cur_v6;
            bad_r <= cur_bad;
            end_r <= cur_end;
        end
    end
    if (rst) begin
        s1_v  <= 1'b0;
        beat  <= {BW{1'b0}};
        v4_r  <= 1'b0;
        v6_r  <= 1'b0;
        bad_r <= 1'b0;
        end_r <= {(OFFW+1){1'b1}};
    end
end

// ================================================================ S2: end of the covered range
reg            done_r;      // check: the covered range already ended in an earlier beat
reg [OFFW-1:0] off;         // frame offset of lane 0
reg [OFFW+1:0] rem;         // s1_end - off, two's complement
reg            rem_neg;
reg            final_beat;  // the covered range ends in this beat
reg [LW:0]     covered;     // covered bytes in the beat

always @* begin
    off = {s1_beat, {LW{1'b0}}};
    rem = {1'b0, s1_end} - {2'b00, off};
    rem_neg = rem[OFFW+1];
    if (CHECK != 0) begin
        final_beat = !done_r && (rem_neg || rem <= {{(OFFW+1-LW){1'b0}}, KEEP_CNT});
        if (rem_neg)
            covered = {(LW+1){1'b0}};
        else if (rem < {{(OFFW+2-7){1'b0}}, s1_cnt})
            covered = rem[LW:0];
        else
            covered = s1_cnt[LW:0];
    end else begin
        final_beat = s1_last;
        covered = s1_cnt[LW:0];
    end
end

wire [OFFW:0] frame_len = {1'b0, off} + {{(OFFW+1-7){1'b0}}, s1_cnt};

reg                  s2_v, s2_v6, s2_final;
reg [PW-1:0]         s2_pay;
reg [BW-1:0]         s2_beat;
reg [LW:0]           s2_covered;
reg [LW-1:0]         s2_zero;   // KEEP_WIDTH - covered, modulo KEEP_WIDTH (a final beat
                                // covers 1..KEEP_WIDTH bytes)

always @(posedge clk) begin
    if (adv) begin
        s2_v       <= s1_v;
        s2_pay     <= {s1_data, s1_keep, s1_last, s1_user, s1_v4 || s1_v6,
                       (CHECK != 0) && (s1_bad || (s1_last &&
                        (frame_len < s1_end || !(done_r || final_beat)))),
                       s1_cnt};
        s2_v6      <= s1_v6;
        s2_beat    <= s1_beat;
        s2_final   <= s1_v && final_beat;
        s2_covered <= covered;
        s2_zero    <= {LW{1'b0}} - covered[LW-1:0];
        if (s1_v)
            done_r <= !s1_last && (done_r || ((CHECK != 0) && final_beat));
    end
    if (rst) begin
        s2_v   <= 1'b0;
        done_r <= 1'b0;
    end
end

// ================================================================ S3: the bytes the CRC sees
// Substituted fields, and zeros past the covered bytes (the packer already zeroes lanes past
// tkeep; check mode also cuts off Ethernet padding).
wire [DATA_WIDTH-1:0] cover_bits = ~({DATA_WIDTH{1'b1}} << {s2_covered, 3'b000});
reg  [DATA_WIDTH-1:0] sub_zero, sub_one;

always @* begin
    sub_zero = {DATA_WIDTH{1'b0}};
    sub_one  = {DATA_WIDTH{1'b0}};
    if (s2_beat < SUB_BEATS_B) begin
        sub_zero = SUB_ZERO[s2_beat*DATA_WIDTH +: DATA_WIDTH];
        sub_one  = s2_v6 ? SUB_ONE_V6[s2_beat*DATA_WIDTH +: DATA_WIDTH]
                         : SUB_ONE_V4[s2_beat*DATA_WIDTH +: DATA_WIDTH];
    end
end

wire [DATA_WIDTH-1:0] s2_tdata = s2_pay[PW-1 -: DATA_WIDTH];

reg                  s3_v, s3_final;
reg [PW-1:0]         s3_pay;
reg [LW-1:0]         s3_zero;
reg [DATA_WIDTH-1:0] s3_bytes;

always @(posedge clk) begin
    if (adv) begin
        s3_v     <= s2_v;
        s3_pay   <= s2_pay;
        s3_final <= s2_final;
        s3_zero  <= s2_zero;
        s3_bytes <= ((s2_tdata & ~sub_zero) | sub_one) & cover_bits;
    end
    if (rst)
        s3_v <= 1'b0;
end

// ================================================================ S4: the data's share
// The CRC is linear: the register after a beat is S * register ^ D * data. D * data needs no
// register, so it is computed a stage ahead and the recurrence (S5) keeps only S * register.
wire [31:0] d_share;

crc32_beat #(
    .DATA_BYTES(KEEP_WIDTH)
) u_data (
    .state_in(32'd0),
    .data_in(s3_bytes),
    .state_out(d_share)
);

reg          s4_v, s4_final;
reg [PW-1:0] s4_pay;
reg [LW-1:0] s4_zero;
reg [31:0]   s4_d;

always @(posedge clk) begin
    if (adv) begin
        s4_v     <= s3_v;
        s4_pay   <= s3_pay;
        s4_final <= s3_final;
        s4_zero  <= s3_zero;
        s4_d     <= d_share;
    end
    if (rst)
        s4_v <= 1'b0;
end

// ================================================================ S5: the CRC register
// crc_r is zero at the start of every frame (cleared by the previous frame's last beat), which
// is what the folded pseudo-header assumes. Beats after the final covered one (check mode:
// Ethernet padding) change crc_r, but only fin_crc_r is used.
reg  [31:0] crc_r;
wire [31:0] s_share;

crc32_beat #(
    .DATA_BYTES(KEEP_WIDTH)
) u_state (
    .state_in(crc_r),
    .data_in({DATA_WIDTH{1'b0}}),
    .state_out(s_share)
);

wire [31:0] crc_next = s_share ^ s4_d;

reg          s5_v;
reg [PW-1:0] s5_pay;
reg [31:0]   fin_crc_r;   // CRC register after the final covered beat (zero-filled)
reg [LW-1:0] fin_zero_r;  // zero bytes past the covered range in that beat

always @(posedge clk) begin
    if (adv) begin
        s5_v   <= s4_v;
        s5_pay <= s4_pay;
        if (s4_v) begin
            crc_r <= s4_pay[P_LAST] ? 32'd0 : crc_next;
            if (s4_final) begin
                fin_crc_r  <= crc_next;
                fin_zero_r <= s4_zero;
            end
        end
    end
    if (rst) begin
        s5_v       <= 1'b0;
        crc_r      <= 32'd0;
        fin_crc_r  <= 32'd0;
        fin_zero_r <= {LW{1'b0}};
    end
end

// ================================================================ U0..U(LW-1): unshift
// Stage j takes 2**j zero bytes back out of the kept register if bit j of their count is set.
// The beats move in step, so the beat in stage j sees the register kept when it was in S5.
genvar j;
generate
    for (j = 0; j < LW; j = j + 1) begin : g_un
        wire          p_v;
        wire [PW-1:0] p_pay;
        wire [31:0]   p_crc;
        wire [LW-1:0] p_zero;
        wire [31:0]   back;
        reg           v;
        reg  [PW-1:0] pay;
        reg  [31:0]   crc;
        // (the last stage's zero-byte count is not read: no stage after it takes one out)
        /* verilator lint_off UNUSEDSIGNAL */
        reg  [LW-1:0] zero;
        /* verilator lint_on UNUSEDSIGNAL */
        if (j == 0) begin : g_first
            assign p_v = s5_v;
            assign p_pay = s5_pay;
            assign p_crc = fin_crc_r;
            assign p_zero = fin_zero_r;
        end else begin : g_next
            assign p_v = g_un[j-1].v;
            assign p_pay = g_un[j-1].pay;
            assign p_crc = g_un[j-1].crc;
            assign p_zero = g_un[j-1].zero;
        end
        crc32_unshift #(
            .SHIFT_WIDTH(1),
            .FIRST_STAGE(j)
        ) u_unshift (
            .state_in(p_crc),
            .shift(p_zero[j]),
            .state_out(back)
        );
        always @(posedge clk) begin
            if (adv) begin
                v    <= p_v;
                pay  <= p_pay;
                crc  <= back;
                zero <= p_zero;
            end
            if (rst)
                v <= 1'b0;
        end
    end
endgenerate

assign m_axis_tvalid = g_un[LW-1].v;
assign {m_axis_tdata, m_axis_tkeep, m_axis_tlast, m_axis_tuser, m_ip, m_bad, m_cnt} =
    g_un[LW-1].pay;
assign m_crc = g_un[LW-1].crc;

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXIS_IN("crc32_roce_icrc in", DATA_WIDTH, KEEP_WIDTH, 0)
    `NIC_CHECK_AXIS_OUT("crc32_roce_icrc out", DATA_WIDTH, KEEP_WIDTH, 0)

endmodule

`default_nettype wire
