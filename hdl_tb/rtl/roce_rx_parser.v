// roce_rx_parser: RoCEv2 receive parser.
//
// Input: whole Ethernet frames (no FCS) on s_axis, packed tkeep, byte 0 of the frame in
// tdata[7:0]. s_axis_tuser = 1 on the last beat means "bad ICRC" (the verdict of
// roce_icrc_check in front of this block; it is only looked at for frames that are otherwise
// well-formed RoCEv2 packets, like nicsim.wire.parse checks the ICRC last).
//
// Every input frame ends up in exactly one place, decided in the order nicsim.wire.parse
// checks a frame (so the drop reason is the ParseError that parse raises):
//   * a well-formed RoCEv2 packet (IPv4 or IPv6, UDP dport 4791, known opcode, TVer 0,
//     lengths consistent, ICRC good): one metadata record on m_meta_* and its payload bytes on
//     m_axis_* (no headers, pad or ICRC; packed; tlast on the last payload beat; a packet
//     without payload produces no payload beat), counted in stat_rx_packets;
//   * anything parse rejects as NOT_IP, NOT_UDP or NOT_ROCE (EtherType not IPv4/IPv6, IP
//     protocol not UDP, UDP port not 4791): passed unchanged on m_bypass_*, counted in
//     stat_bypass;
//   * anything else: dropped, counted in one stat_drop_<reason> counter.
// Hardware deviations from nicsim.wire.parse (documented, not bugs):
//   * IPv4 headers with options (IHL > 5) are not parsed in hardware: such frames go to the
//     bypass port unchanged (the slow path), whatever parse would say about them. IHL < 5
//     is dropped as bad_ip_header, as parse does.
//   * A frame with more beats than a FIFO can buffer (see the FIFO depth parameters) is
//     dropped and counted in stat_drop_oversize (parse has no such limit).
//   * s_axis_tuser of a frame that is not a RoCEv2 packet is ignored for the verdict (it is
//     carried to m_bypass_tuser on bypassed frames).
//
// Buffering choice. The ICRC verdict (and the frame length, which several of parse's checks
// need: truncated / bad IP length) is only known on the last beat, and dropped frames must
// produce neither metadata nor payload. So this block is store-and-forward with speculative
// writes: payload beats are aligned (headers stripped) on the fly and written into a payload
// FIFO with a committed write pointer; on the last beat the frame's verdict either commits
// them (the reader only ever sees committed beats) or rolls the write pointer back. Bypass
// candidates are written the same way into a bypass FIFO (raw beats). The metadata of a good
// frame is pushed into a metadata FIFO on its last beat, from a header register file (the
// first HDR_BYTES bytes of the frame, captured as the beats go by); its payload is committed
// on the same cycle, or one cycle later when the final aligned payload beat lies wholly in the
// frame's last input beat (that extra write overlaps the next frame's first beat, which never
// produces a payload beat, so there is no bubble). Holding the payload rather than only the
// metadata is what the late verdict forces: the payload would otherwise have to be recalled.
//
// Throughput: 1 input beat per cycle sustained, no bubble between back-to-back frames of any
// size, as long as the outputs are ready (the FIFOs absorb output backpressure; s_axis_tready
// drops only when a FIFO is nearly full). Output latency is one frame (store-and-forward).
//
// Parameters:
//   DATA_WIDTH         - AXI-Stream data width in bits (32 or more, a power of two; regressed
//                        at 64 and 512, also run at 32 and 128).
//   KEEP_WIDTH         - DATA_WIDTH/8.
//   PAYLOAD_FIFO_DEPTH - payload FIFO depth in beats (power of two). A RoCE frame of more
//                        than PAYLOAD_FIFO_DEPTH-4 beats is dropped (stat_drop_oversize). For
//                        full throughput it should hold about two of the largest frames.
//   BYPASS_FIFO_DEPTH  - bypass FIFO depth in beats (power of two); bypass frames of more than
//                        BYPASS_FIFO_DEPTH-4 beats are dropped (stat_drop_oversize).
//   META_FIFO_DEPTH    - metadata FIFO depth in records (power of two, at least 4).
//   (FIFO depths up to 32768: frame beats are counted in 16 bits.)
//
// Resources: the three FIFO memories (payload: DATA_WIDTH + log2(KEEP_WIDTH) + 1 bits,
// bypass: DATA_WIDTH + KEEP_WIDTH + 2 bits, metadata: 723 bits per entry) are inferred as
// RAM with a registered read; the header register file is 816 flip-flops.
//
// Ports:
//   clk, rst           - clock, synchronous active-high reset.
//   s_axis_*           - input frames (tdata/tkeep/tvalid/tready/tlast/tuser; tuser = bad
//                        ICRC, sampled on the last beat).
//   m_axis_*           - payload of accepted RoCE packets (tdata/tkeep/tvalid/tready/tlast).
//   m_bypass_*         - non-RoCE frames, unchanged (tdata/tkeep/tvalid/tready/tlast/tuser,
//                        each beat as it came in).
//   m_meta_valid/ready - one record per accepted RoCE packet, in frame order (the payload of
//                        the same packet is on m_axis_* in the same order). Fields (network
//                        byte order values, i.e. the big-endian integer of the wire bytes):
//     m_meta_dmac[47:0], m_meta_smac[47:0]   - Ethernet addresses.
//     m_meta_ipv6                           - 1 for IPv6, 0 for IPv4.
//     m_meta_sip[127:0], m_meta_dip[127:0]   - IP addresses (IPv4 in bits [31:0], rest 0).
//     m_meta_tos[7:0]                       - IPv4 TOS / IPv6 traffic class (DSCP+ECN).
//     m_meta_udp_sport[15:0]                - UDP source port.
//     m_meta_opcode[7:0], m_meta_solicited, m_meta_migreq, m_meta_padcount[1:0],
//     m_meta_pkey[15:0], m_meta_fecn, m_meta_becn, m_meta_dqpn[23:0], m_meta_ackreq,
//     m_meta_psn[23:0]                      - BTH fields (TVer is always 0 here).
//     m_meta_flags[9:0]                     - roce_opcode_flags(opcode) from roce_opcodes.vh:
//                                             bit ROCE_F_<EXT> set when that extension
//                                             header is present (bit 0 VALID, bit 9 PAYLOAD
//                                             = the opcode carries a payload).
//     m_meta_payload_len[15:0]              - payload bytes (without pad and ICRC).
//     m_meta_reth_va[63:0], m_meta_reth_rkey[31:0], m_meta_reth_len[31:0],
//     m_meta_aeth_syndrome[7:0], m_meta_aeth_msn[23:0], m_meta_imm[31:0],
//     m_meta_ieth_rkey[31:0], m_meta_atomic_va[63:0], m_meta_atomic_rkey[31:0],
//     m_meta_atomic_swap_add[63:0], m_meta_atomic_compare[63:0], m_meta_atomic_orig[63:0],
//     m_meta_deth_qkey[31:0], m_meta_deth_src_qp[23:0]
//                                           - extension header fields (nicsim.wire.Packet
//                                             names); 0 when the header is absent.
//   stat_*[31:0]       - free-running counters (wrap at 2^32), one increment per frame:
//     stat_rx_packets (accepted RoCE packets), stat_bypass, stat_drop_bad_icrc,
//     stat_drop_truncated, stat_drop_bad_ip_version, stat_drop_bad_ip_header,
//     stat_drop_bad_ip_checksum, stat_drop_bad_ip_length, stat_drop_bad_udp_length,
//     stat_drop_unknown_opcode, stat_drop_bad_transport_version, stat_drop_short_headers,
//     stat_drop_bad_padcount, stat_drop_oversize.

`default_nettype none
`include "nic_common.vh"

module roce_rx_parser #(
    parameter DATA_WIDTH = 64,
    parameter KEEP_WIDTH = DATA_WIDTH/8,
    parameter PAYLOAD_FIFO_DEPTH = 8192/KEEP_WIDTH,
    parameter BYPASS_FIFO_DEPTH = 4096/KEEP_WIDTH,
    parameter META_FIFO_DEPTH = 16
) (
    input  wire                  clk,
    input  wire                  rst,

    `NIC_AXIS_SLAVE_PORTS(DATA_WIDTH, KEEP_WIDTH),
    input  wire                  s_axis_tuser,

    `NIC_AXIS_MASTER_PORTS(wire, DATA_WIDTH, KEEP_WIDTH),

    output wire [DATA_WIDTH-1:0] m_bypass_tdata,
    output wire [KEEP_WIDTH-1:0] m_bypass_tkeep,
    output wire                  m_bypass_tvalid,
    input  wire                  m_bypass_tready,
    output wire                  m_bypass_tlast,
    output wire                  m_bypass_tuser,

    `NIC_ROCE_RX_META_PORTS,

    `NIC_ROCE_RX_STAT_PORTS(reg)
);

/* verilator lint_off UNUSEDPARAM */
`include "roce_opcodes.vh"
/* verilator lint_on UNUSEDPARAM */

    `NIC_CLOG2_FUNCTION

    localparam KB = clog2(KEEP_WIDTH);          // log2 of bytes per beat
    localparam PAW = clog2(PAYLOAD_FIFO_DEPTH);
    localparam BAW = clog2(BYPASS_FIFO_DEPTH);
    localparam MAW = clog2(META_FIFO_DEPTH);
    localparam BW = 16;                         // beat counter width (saturating)
    localparam NW = BW + KB + 1;                // frame length width
    /* verilator lint_off WIDTHTRUNC */
    localparam [BW-1:0] PAY_LIMIT = PAYLOAD_FIFO_DEPTH - 4;   // longest frames, in beats
    localparam [BW-1:0] BYP_LIMIT = BYPASS_FIFO_DEPTH - 4;
    localparam [16:0] KW_M1 = KEEP_WIDTH - 1;
    localparam [PAW:0] PAY_MAX_USED = PAYLOAD_FIFO_DEPTH - 3;
    localparam [BAW:0] BYP_MAX_USED = BYPASS_FIFO_DEPTH - 3;
    localparam [MAW:0] META_MAX_USED = META_FIFO_DEPTH - 3;
    // Beat index holding the last byte of: BTH byte 1 / the UDP destination port.
    localparam [BW-1:0] OPC_BEAT4 = 43 >> KB, OPC_BEAT6 = 63 >> KB;
    localparam [BW-1:0] PORT_BEAT4 = 37 >> KB, PORT_BEAT6 = 57 >> KB;
    /* verilator lint_on WIDTHTRUNC */

    // Header register file: frame bytes 0..HDR_BYTES-1 (Ethernet 14 + IPv6 40 + UDP 8 + BTH 12
    // + the longest extension headers 28 = 102).
    localparam HDR_BYTES = 102;
    localparam EXT_BYTES = 28;

    // Verdicts.
    localparam [3:0] V_OK = 4'd0, V_BYPASS = 4'd1, V_TRUNC = 4'd2, V_IPVER = 4'd3,
                     V_IPHDR = 4'd4, V_IPCSUM = 4'd5, V_IPLEN = 4'd6, V_UDPLEN = 4'd7,
                     V_OPCODE = 4'd8, V_TVER = 4'd9, V_SHORT = 4'd10, V_PADCNT = 4'd11,
                     V_ICRC = 4'd12, V_OVERSIZE = 4'd13;

    integer i;

    // ---------------------------------------------------------------------------------------
    // FIFO state (declared first: s_axis_tready depends on it)

    reg [PAW:0] pay_wr, pay_commit, pay_rd;
    reg [BAW:0] byp_wr, byp_commit, byp_rd;
    reg [MAW:0] meta_wr, meta_rd;

    wire [PAW:0] pay_used = pay_wr - pay_rd;
    wire [BAW:0] byp_used = byp_wr - byp_rd;
    wire [MAW:0] meta_used = meta_wr - meta_rd;

    // At most one write per FIFO per cycle and one beat in flight in stage 1: keep 3 free.
    assign s_axis_tready = !rst
        && (pay_used <= PAY_MAX_USED)
        && (byp_used <= BYP_MAX_USED)
        && (meta_used <= META_MAX_USED);

    wire s_fire = s_axis_tvalid && s_axis_tready;

    // ---------------------------------------------------------------------------------------
    // Stage 0: beat counter and header capture

    reg [BW-1:0] s0_beat;
    reg [8*HDR_BYTES-1:0] hdr;   // frame byte p in hdr[8*p +: 8]

    always @(posedge clk) begin
        if (rst) begin
            s0_beat <= {BW{1'b0}};
        end else if (s_fire) begin
            if (s_axis_tlast)
                s0_beat <= {BW{1'b0}};
            else if (s0_beat != {BW{1'b1}})
                s0_beat <= s0_beat + 1'b1;
        end
    end

    // (Reset only so that simulation never sees X in the stale bytes of the first frame.)
    always @(posedge clk) begin
        if (rst) begin
            hdr <= {8*HDR_BYTES{1'b0}};
        end else if (s_fire) begin
            for (i = 0; i < HDR_BYTES; i = i + 1) begin
                if ({{(32-BW){1'b0}}, s0_beat} == i / KEEP_WIDTH)
                    hdr[8*i +: 8] <= s_axis_tdata[8*(i % KEEP_WIDTH) +: 8];
            end
        end
    end

    // ---------------------------------------------------------------------------------------
    // Stage 1: the registered beat; hdr holds this frame's bytes up to and including it.

    reg                  s1_valid;
    reg [DATA_WIDTH-1:0] s1_data;
    reg [KEEP_WIDTH-1:0] s1_keep;
    reg                  s1_last;
    reg                  s1_user;
    reg [BW-1:0]         s1_beat;
    reg [DATA_WIDTH-1:0] prev;      // the previous beat of the same frame

    always @(posedge clk) begin
        if (rst) begin
            s1_valid <= 1'b0;
        end else begin
            s1_valid <= s_fire;
        end
        if (s_fire) begin
            s1_data <= s_axis_tdata;
            s1_keep <= s_axis_tkeep;
            s1_last <= s_axis_tlast;
            s1_user <= s_axis_tuser;
            s1_beat <= s0_beat;
        end
        if (s1_valid)
            prev <= s1_data;
    end

    wire s1_tl = s1_valid && s1_last;

    // Frame length on the last beat.
    reg [KB:0] keep_cnt;
    always @* begin
        keep_cnt = {(KB+1){1'b0}};
        for (i = 0; i < KEEP_WIDTH; i = i + 1)
            keep_cnt = keep_cnt + s1_keep[i];
    end
    wire [NW-1:0] frame_len = ({{(NW-BW){1'b0}}, s1_beat} << KB)
                              + {{(NW-KB-1){1'b0}}, keep_cnt};

    // ---------------------------------------------------------------------------------------
    // Header fields. A field is meaningful only once its beat has been captured; every use
    // below is gated so that stale bytes from an earlier frame never matter (the verdict
    // follows parse's order, in which each check only reads bytes that earlier checks proved
    // to be inside the frame).

`define RXP_HB(p) hdr[8*(p) +: 8]

    wire [15:0] f_etype = {`RXP_HB(12), `RXP_HB(13)};
    wire        f_v4 = (f_etype == 16'h0800);
    wire        f_v6 = (f_etype == 16'h86dd);
    // IPv4
    wire [7:0]  f_vihl = `RXP_HB(14);
    wire [15:0] f_tot = {`RXP_HB(16), `RXP_HB(17)};
    wire [7:0]  f_proto = `RXP_HB(23);
    // IPv6
    wire [3:0]  f_ver6 = hdr[8*14+4 +: 4];
    wire [7:0]  f_tc6 = {hdr[8*14 +: 4], hdr[8*15+4 +: 4]};
    wire [15:0] f_plen6 = {`RXP_HB(18), `RXP_HB(19)};
    wire [7:0]  f_nxt6 = `RXP_HB(20);

    // IPv4 header checksum (RFC 1071), folded as nicsim.wire.packet._fold does.
    reg [19:0] csum_sum;
    always @* begin
        csum_sum = 20'd0;
        for (i = 0; i < 10; i = i + 1)
            csum_sum = csum_sum + {4'd0, `RXP_HB(14 + 2*i), `RXP_HB(15 + 2*i)};
    end
    wire [16:0] csum_f1 = {1'b0, csum_sum[15:0]} + {13'd0, csum_sum[19:16]};
    /* verilator lint_off UNUSEDSIGNAL */
    wire [16:0] csum_f2 = {1'b0, csum_f1[15:0]} + {16'd0, csum_f1[16]};
    /* verilator lint_on UNUSEDSIGNAL */
    wire        f_csum_ok = (csum_f2[15:0] == 16'hffff);

    // UDP header, BTH and the bytes after BTH: at fixed offsets for IPv4 (IHL 5) and IPv6.
    // Big-endian: the first wire byte in the most significant bits.
    /* verilator lint_off UNUSEDSIGNAL */
    reg [8*8-1:0]         udp_raw;       // the UDP checksum is not used
    /* verilator lint_on UNUSEDSIGNAL */
    reg [8*12-1:0]        bth_raw;
    reg [8*EXT_BYTES-1:0] ext_raw;
    reg [127:0]           sip_raw, dip_raw;
    always @* begin
        for (i = 0; i < 8; i = i + 1)
            udp_raw[8*(7-i) +: 8] = f_v6 ? `RXP_HB(54 + i) : `RXP_HB(34 + i);
        for (i = 0; i < 12; i = i + 1)
            bth_raw[8*(11-i) +: 8] = f_v6 ? `RXP_HB(62 + i) : `RXP_HB(42 + i);
        for (i = 0; i < EXT_BYTES; i = i + 1)
            ext_raw[8*(EXT_BYTES-1-i) +: 8] = f_v6 ? `RXP_HB(74 + i) : `RXP_HB(54 + i);
        for (i = 0; i < 16; i = i + 1) begin
            sip_raw[8*(15-i) +: 8] = f_v6 ? `RXP_HB(22 + i) : (i >= 12 ? `RXP_HB(26 + i - 12) : 8'd0);
            dip_raw[8*(15-i) +: 8] = f_v6 ? `RXP_HB(38 + i) : (i >= 12 ? `RXP_HB(30 + i - 12) : 8'd0);
        end
    end

    wire [15:0] f_sport = udp_raw[63:48];
    wire [15:0] f_dport = udp_raw[47:32];
    wire [15:0] f_ulen = udp_raw[31:16];
    wire [7:0]  f_opcode = bth_raw[95:88];
    wire [1:0]  f_pad = bth_raw[85:84];
    wire [3:0]  f_tver = bth_raw[83:80];
    wire [9:0]  f_opflags = roce_opcode_flags(f_opcode);
    wire [7:0]  f_extlen = roce_ext_len(f_opcode);

    // L4 length per the IP header (UDP header + BTH + ... + ICRC), end of the IP packet.
    wire [15:0] f_l4len = f_v6 ? f_plen6 : (f_tot - 16'd20);
    wire [16:0] f_end = f_v6 ? (17'd54 + {1'b0, f_plen6}) : (17'd14 + {1'b0, f_tot});
    // Payload offset in the frame and payload length (bit 18 set: negative).
    wire [7:0]  f_off = (f_v6 ? 8'd74 : 8'd54) + f_extlen;
    /* verilator lint_off UNUSEDSIGNAL */
    wire [18:0] f_plen_x = {3'd0, f_l4len} - 19'd24 - {11'd0, f_extlen} - {17'd0, f_pad};
    /* verilator lint_on UNUSEDSIGNAL */
    wire        f_plen_neg = f_plen_x[18];
    wire [15:0] f_plen = f_plen_neg ? 16'd0 : f_plen_x[15:0];
    wire [16:0] f_nb_out = ({1'b0, f_plen} + KW_M1) >> KB;
    wire [7:0]  f_jb = f_off >> KB;
    wire [KB-1:0] f_s = f_off[KB-1:0];

    // Fields through BTH byte 1 (opcode, pad) have been captured / the UDP port has.
    /* verilator lint_off UNSIGNED */
    wire f_ready = s1_beat >= (f_v6 ? OPC_BEAT6 : OPC_BEAT4);
    wire f_dport_ready = s1_beat >= (f_v6 ? PORT_BEAT6 : PORT_BEAT4);
    /* verilator lint_on UNSIGNED */
    wire f_looks_roce = ((f_v4 && f_vihl == 8'h45 && f_proto == 8'd17)
                         || (f_v6 && f_ver6 == 4'd6 && f_nxt6 == 8'd17))
                        && f_dport == 16'd4791;

    // ---------------------------------------------------------------------------------------
    // Verdict on the last beat, in nicsim.wire.parse's order.

    reg pay_ovf, byp_ovf;           // this frame overflowed the payload / bypass FIFO
    wire pay_ovf_now = s1_valid && (s1_beat >= PAY_LIMIT);
    wire byp_ovf_now = s1_valid && (s1_beat >= BYP_LIMIT);
    wire pay_ovf_any = pay_ovf || pay_ovf_now;
    wire byp_ovf_any = byp_ovf || byp_ovf_now;

    reg [3:0] v_roce, verdict;
    always @* begin
        // Checks from the UDP port on (parse steps after the IP header).
        if (f_dport != 16'd4791)
            v_roce = V_BYPASS;
        else if (f_ulen != f_l4len)
            v_roce = V_UDPLEN;
        else if (f_l4len < 16'd24)
            v_roce = V_TRUNC;
        else if (!f_opflags[ROCE_F_VALID])
            v_roce = V_OPCODE;
        else if (f_tver != 4'd0)
            v_roce = V_TVER;
        else if (f_plen_neg)
            v_roce = V_SHORT;
        else if (!f_opflags[ROCE_F_PAYLOAD] && (f_plen != 16'd0 || f_pad != 2'd0))
            v_roce = (f_pad != 2'd0) ? V_PADCNT : V_SHORT;
        else if (s1_user)
            v_roce = V_ICRC;
        else if (pay_ovf_any)
            v_roce = V_OVERSIZE;
        else
            v_roce = V_OK;

        if (frame_len < 14) begin
            verdict = V_TRUNC;
        end else if (f_v4) begin
            if (frame_len < 34)
                verdict = V_TRUNC;
            else if (f_vihl[7:4] != 4'd4)
                verdict = V_IPVER;
            else if (f_vihl[3:0] < 4'd5)
                verdict = V_IPHDR;
            else if (f_vihl[3:0] > 4'd5)
                verdict = V_BYPASS;     // IPv4 options: not parsed in hardware
            else if (!f_csum_ok)
                verdict = V_IPCSUM;
            else if (f_tot < 16'd28 || {{(NW-17){1'b0}}, f_end} > frame_len)
                verdict = V_IPLEN;
            else if (f_proto != 8'd17)
                verdict = V_BYPASS;
            else
                verdict = v_roce;
        end else if (f_v6) begin
            if (frame_len < 54)
                verdict = V_TRUNC;
            else if (f_ver6 != 4'd6)
                verdict = V_IPVER;
            else if (f_nxt6 != 8'd17)
                verdict = V_BYPASS;
            else if (f_plen6 < 16'd8 || {{(NW-17){1'b0}}, f_end} > frame_len)
                verdict = V_IPLEN;
            else
                verdict = v_roce;
        end else begin
            verdict = V_BYPASS;
        end
        if (verdict == V_BYPASS && byp_ovf_any)
            verdict = V_OVERSIZE;
    end

    wire v_ok = (verdict == V_OK);
    wire v_bypass = (verdict == V_BYPASS);

    // ---------------------------------------------------------------------------------------
    // Payload alignment: output beat j of a packet is frame bytes [off + j*W, off + (j+1)*W),
    // i.e. ({beat, prev} >> 8*s) taken when input beat jb+j+1 is in stage 1; the last output
    // beat, when its bytes all lie in the frame's last beat, is written the cycle after.

    reg [16:0]   out_cnt;            // payload beats written for this frame
    reg          flush_pending;
    reg [KB-1:0] flush_s;
    reg [KB-1:0] flush_rem;

    wire emit = s1_valid && f_looks_roce && f_ready && ({{(BW-8){1'b0}}, f_jb} < s1_beat)
                && (out_cnt < f_nb_out) && !pay_ovf_any;
    wire emit_last = (out_cnt + 17'd1 == f_nb_out);
    wire need_flush = v_ok && ((out_cnt + {16'd0, emit}) < f_nb_out);

    wire [KB-1:0]         sh_amt = flush_pending ? flush_s : f_s;
    wire [2*DATA_WIDTH-1:0] sh_in = {s1_data, prev};
    /* verilator lint_off UNUSEDSIGNAL */
    wire [2*DATA_WIDTH-1:0] sh_out = sh_in >> {sh_amt, 3'b000};
    /* verilator lint_on UNUSEDSIGNAL */

    wire                  pay_we = emit || flush_pending;
    wire                  pay_wlast = flush_pending || emit_last;
    wire [KB-1:0]         pay_wrem = flush_pending ? flush_rem : f_plen[KB-1:0];
    wire [DATA_WIDTH+KB:0] pay_wentry = {pay_wlast, (pay_wlast ? pay_wrem : {KB{1'b0}}),
                                         sh_out[DATA_WIDTH-1:0]};

    wire pay_commit_now = flush_pending || (s1_tl && v_ok && !need_flush);
    wire pay_rollback_now = (s1_tl && !v_ok) || pay_ovf_now;
    wire [PAW:0] pay_wr_inc = pay_wr + {{PAW{1'b0}}, pay_we};
    wire [PAW:0] pay_commit_next = pay_commit_now ? pay_wr_inc : pay_commit;

    // Bypass: raw beats of frames that may turn out not to be RoCE.
    wire byp_cand = !(f_dport_ready && f_looks_roce);
    wire byp_we = s1_valid && byp_cand && !byp_ovf_any;
    wire byp_commit_now = s1_tl && v_bypass;
    wire byp_rollback_now = (s1_tl && !v_bypass) || byp_ovf_now;
    wire [BAW:0] byp_wr_inc = byp_wr + {{BAW{1'b0}}, byp_we};

    // Metadata record (raw header bytes; decoded at the output).
    localparam META_W = 48 + 48 + 1 + 128 + 128 + 8 + 16 + 96 + 8*EXT_BYTES + 10 + 16;
    wire meta_we = s1_tl && v_ok;
    wire [META_W-1:0] meta_wentry = {
        hdr[8*0 +: 8], hdr[8*1 +: 8], hdr[8*2 +: 8], hdr[8*3 +: 8], hdr[8*4 +: 8], hdr[8*5 +: 8],
        hdr[8*6 +: 8], hdr[8*7 +: 8], hdr[8*8 +: 8], hdr[8*9 +: 8], hdr[8*10 +: 8], hdr[8*11 +: 8],
        f_v6, sip_raw, dip_raw, (f_v6 ? f_tc6 : `RXP_HB(15)), f_sport, bth_raw, ext_raw,
        f_opflags, f_plen};

`undef RXP_HB

    always @(posedge clk) begin
        if (rst) begin
            out_cnt <= 17'd0;
            flush_pending <= 1'b0;
            pay_ovf <= 1'b0;
            byp_ovf <= 1'b0;
            pay_wr <= {(PAW+1){1'b0}};
            pay_commit <= {(PAW+1){1'b0}};
            byp_wr <= {(BAW+1){1'b0}};
            byp_commit <= {(BAW+1){1'b0}};
            meta_wr <= {(MAW+1){1'b0}};
        end else begin
            flush_pending <= s1_tl && need_flush;
            if (s1_tl) begin
                out_cnt <= 17'd0;
                pay_ovf <= 1'b0;
                byp_ovf <= 1'b0;
            end else begin
                if (emit)
                    out_cnt <= out_cnt + 17'd1;
                if (pay_ovf_now)
                    pay_ovf <= 1'b1;
                if (byp_ovf_now)
                    byp_ovf <= 1'b1;
            end
            if (s1_tl && need_flush) begin
                flush_s <= f_s;
                flush_rem <= f_plen[KB-1:0];
            end

            pay_commit <= pay_commit_next;
            pay_wr <= pay_rollback_now ? pay_commit_next : pay_wr_inc;

            if (byp_commit_now)
                byp_commit <= byp_wr_inc;
            byp_wr <= byp_rollback_now ? byp_commit : byp_wr_inc;

            if (meta_we)
                meta_wr <= meta_wr + 1'b1;
        end
    end

    // Counters.
    always @(posedge clk) begin
        if (rst) begin
            stat_rx_packets <= 32'd0;
            stat_bypass <= 32'd0;
            stat_drop_bad_icrc <= 32'd0;
            stat_drop_truncated <= 32'd0;
            stat_drop_bad_ip_version <= 32'd0;
            stat_drop_bad_ip_header <= 32'd0;
            stat_drop_bad_ip_checksum <= 32'd0;
            stat_drop_bad_ip_length <= 32'd0;
            stat_drop_bad_udp_length <= 32'd0;
            stat_drop_unknown_opcode <= 32'd0;
            stat_drop_bad_transport_version <= 32'd0;
            stat_drop_short_headers <= 32'd0;
            stat_drop_bad_padcount <= 32'd0;
            stat_drop_oversize <= 32'd0;
        end else if (s1_tl) begin
            case (verdict)
                V_OK:       stat_rx_packets <= stat_rx_packets + 32'd1;
                V_BYPASS:   stat_bypass <= stat_bypass + 32'd1;
                V_TRUNC:    stat_drop_truncated <= stat_drop_truncated + 32'd1;
                V_IPVER:    stat_drop_bad_ip_version <= stat_drop_bad_ip_version + 32'd1;
                V_IPHDR:    stat_drop_bad_ip_header <= stat_drop_bad_ip_header + 32'd1;
                V_IPCSUM:   stat_drop_bad_ip_checksum <= stat_drop_bad_ip_checksum + 32'd1;
                V_IPLEN:    stat_drop_bad_ip_length <= stat_drop_bad_ip_length + 32'd1;
                V_UDPLEN:   stat_drop_bad_udp_length <= stat_drop_bad_udp_length + 32'd1;
                V_OPCODE:   stat_drop_unknown_opcode <= stat_drop_unknown_opcode + 32'd1;
                V_TVER:     stat_drop_bad_transport_version <= stat_drop_bad_transport_version + 32'd1;
                V_SHORT:    stat_drop_short_headers <= stat_drop_short_headers + 32'd1;
                V_PADCNT:   stat_drop_bad_padcount <= stat_drop_bad_padcount + 32'd1;
                V_ICRC:     stat_drop_bad_icrc <= stat_drop_bad_icrc + 32'd1;
                default:    stat_drop_oversize <= stat_drop_oversize + 32'd1;
            endcase
        end
    end

    // ---------------------------------------------------------------------------------------
    // FIFO memories and read sides (registered outputs, one beat per cycle).

    reg [DATA_WIDTH+KB:0]     pay_mem [0:PAYLOAD_FIFO_DEPTH-1];
    reg [DATA_WIDTH+KEEP_WIDTH+1:0] byp_mem [0:BYPASS_FIFO_DEPTH-1];
    reg [META_W-1:0]          meta_mem [0:META_FIFO_DEPTH-1];

    always @(posedge clk) begin
        if (pay_we)
            pay_mem[pay_wr[PAW-1:0]] <= pay_wentry;
    end
    always @(posedge clk) begin
        if (byp_we)
            byp_mem[byp_wr[BAW-1:0]] <= {s1_user, s1_last, s1_keep, s1_data};
    end
    always @(posedge clk) begin
        if (meta_we)
            meta_mem[meta_wr[MAW-1:0]] <= meta_wentry;
    end

    reg                   pay_q_valid, byp_q_valid, meta_q_valid;
    reg [DATA_WIDTH+KB:0] pay_q;
    reg [DATA_WIDTH+KEEP_WIDTH+1:0] byp_q;
    reg [META_W-1:0]      meta_q;

    wire pay_re = (pay_rd != pay_commit) && (!pay_q_valid || m_axis_tready);
    wire byp_re = (byp_rd != byp_commit) && (!byp_q_valid || m_bypass_tready);
    wire meta_re = (meta_rd != meta_wr) && (!meta_q_valid || m_meta_ready);

    always @(posedge clk) begin
        if (pay_re)
            pay_q <= pay_mem[pay_rd[PAW-1:0]];
    end
    always @(posedge clk) begin
        if (byp_re)
            byp_q <= byp_mem[byp_rd[BAW-1:0]];
    end
    always @(posedge clk) begin
        if (meta_re)
            meta_q <= meta_mem[meta_rd[MAW-1:0]];
    end

    always @(posedge clk) begin
        if (rst) begin
            pay_rd <= {(PAW+1){1'b0}};
            byp_rd <= {(BAW+1){1'b0}};
            meta_rd <= {(MAW+1){1'b0}};
            pay_q_valid <= 1'b0;
            byp_q_valid <= 1'b0;
            meta_q_valid <= 1'b0;
        end else begin
            if (pay_re) begin
                pay_rd <= pay_rd + 1'b1;
                pay_q_valid <= 1'b1;
            end else if (m_axis_tready) begin
                pay_q_valid <= 1'b0;
            end
            if (byp_re) begin
                byp_rd <= byp_rd + 1'b1;
                byp_q_valid <= 1'b1;
            end else if (m_bypass_tready) begin
                byp_q_valid <= 1'b0;
            end
            if (meta_re) begin
                meta_rd <= meta_rd + 1'b1;
                meta_q_valid <= 1'b1;
            end else if (m_meta_ready) begin
                meta_q_valid <= 1'b0;
            end
        end
    end

    // Payload output.
    wire [KB-1:0] pay_q_rem = pay_q[DATA_WIDTH +: KB];
    reg  [KEEP_WIDTH-1:0] pay_q_keep;
    always @* begin
        for (i = 0; i < KEEP_WIDTH; i = i + 1)
            pay_q_keep[i] = (pay_q_rem == {KB{1'b0}}) || (i < pay_q_rem);
    end
    assign m_axis_tdata = pay_q[DATA_WIDTH-1:0];
    assign m_axis_tkeep = pay_q_keep;
    assign m_axis_tlast = pay_q[DATA_WIDTH+KB];
    assign m_axis_tvalid = pay_q_valid;

    // Bypass output.
    assign m_bypass_tdata = byp_q[DATA_WIDTH-1:0];
    assign m_bypass_tkeep = byp_q[DATA_WIDTH +: KEEP_WIDTH];
    assign m_bypass_tlast = byp_q[DATA_WIDTH+KEEP_WIDTH];
    assign m_bypass_tuser = byp_q[DATA_WIDTH+KEEP_WIDTH+1];
    assign m_bypass_tvalid = byp_q_valid;

    // Metadata output: decode the stored raw headers.
    localparam MO_PLEN = 0;
    localparam MO_FLAGS = MO_PLEN + 16;
    localparam MO_EXT = MO_FLAGS + 10;
    localparam MO_BTH = MO_EXT + 8*EXT_BYTES;
    localparam MO_SPORT = MO_BTH + 96;
    localparam MO_TOS = MO_SPORT + 16;
    localparam MO_DIP = MO_TOS + 8;
    localparam MO_SIP = MO_DIP + 128;
    localparam MO_V6 = MO_SIP + 128;
    localparam MO_SMAC = MO_V6 + 1;
    localparam MO_DMAC = MO_SMAC + 48;

    /* verilator lint_off UNUSEDSIGNAL */
    wire [95:0]            q_bth = meta_q[MO_BTH +: 96];    // TVer and reserved bits unused
    /* verilator lint_on UNUSEDSIGNAL */
    wire [8*EXT_BYTES-1:0] q_ext = meta_q[MO_EXT +: 8*EXT_BYTES];
    wire [9:0]             q_fl = meta_q[MO_FLAGS +: 10];

    assign m_meta_valid = meta_q_valid;
    assign m_meta_dmac = meta_q[MO_DMAC +: 48];
    assign m_meta_smac = meta_q[MO_SMAC +: 48];
    assign m_meta_ipv6 = meta_q[MO_V6];
    assign m_meta_sip = meta_q[MO_SIP +: 128];
    assign m_meta_dip = meta_q[MO_DIP +: 128];
    assign m_meta_tos = meta_q[MO_TOS +: 8];
    assign m_meta_udp_sport = meta_q[MO_SPORT +: 16];
    assign m_meta_flags = q_fl;
    assign m_meta_payload_len = meta_q[MO_PLEN +: 16];
    assign m_meta_opcode = q_bth[95:88];
    assign m_meta_solicited = q_bth[87];
    assign m_meta_migreq = q_bth[86];
    assign m_meta_padcount = q_bth[85:84];
    assign m_meta_pkey = q_bth[79:64];
    assign m_meta_fecn = q_bth[63];
    assign m_meta_becn = q_bth[62];
    assign m_meta_dqpn = q_bth[55:32];
    assign m_meta_ackreq = q_bth[31];
    assign m_meta_psn = q_bth[23:0];

    // Extension headers follow BTH in the order RETH (16), AETH (4), AtomicETH (28),
    // AtomicAckETH (8), DETH (8), ImmDt (4), IETH (4) (IBA 9.3); each field is taken at the
    // offset of its header and zeroed when the header is absent.
    wire [5:0] o_aeth = q_fl[ROCE_F_RETH] ? 6'd16 : 6'd0;
    wire [5:0] o_atomic = o_aeth + (q_fl[ROCE_F_AETH] ? 6'd4 : 6'd0);
    wire [5:0] o_aack = o_atomic + (q_fl[ROCE_F_ATOMIC_ETH] ? 6'd28 : 6'd0);
    wire [5:0] o_deth = o_aack + (q_fl[ROCE_F_ATOMIC_ACK_ETH] ? 6'd8 : 6'd0);
    wire [5:0] o_imm = o_deth + (q_fl[ROCE_F_DETH] ? 6'd8 : 6'd0);
    wire [5:0] o_ieth = o_imm + (q_fl[ROCE_F_IMMDT] ? 6'd4 : 6'd0);

    // The 28 bytes after BTH, shifted so that the header at byte offset o starts at the top
    // (only the top bytes of each view are used).
    /* verilator lint_off UNUSEDSIGNAL */
    wire [8*EXT_BYTES-1:0] x_reth = q_fl[ROCE_F_RETH] ? q_ext : {8*EXT_BYTES{1'b0}};
    wire [8*EXT_BYTES-1:0] x_aeth = q_fl[ROCE_F_AETH] ? (q_ext << {o_aeth, 3'b000}) : {8*EXT_BYTES{1'b0}};
    wire [8*EXT_BYTES-1:0] x_atomic = q_fl[ROCE_F_ATOMIC_ETH] ? (q_ext << {o_atomic, 3'b000}) : {8*EXT_BYTES{1'b0}};
    wire [8*EXT_BYTES-1:0] x_aack = q_fl[ROCE_F_ATOMIC_ACK_ETH] ? (q_ext << {o_aack, 3'b000}) : {8*EXT_BYTES{1'b0}};
    wire [8*EXT_BYTES-1:0] x_deth = q_fl[ROCE_F_DETH] ? (q_ext << {o_deth, 3'b000}) : {8*EXT_BYTES{1'b0}};
    wire [8*EXT_BYTES-1:0] x_imm = q_fl[ROCE_F_IMMDT] ? (q_ext << {o_imm, 3'b000}) : {8*EXT_BYTES{1'b0}};
    wire [8*EXT_BYTES-1:0] x_ieth = q_fl[ROCE_F_IETH] ? (q_ext << {o_ieth, 3'b000}) : {8*EXT_BYTES{1'b0}};

    /* verilator lint_on UNUSEDSIGNAL */
    localparam XT = 8*EXT_BYTES - 1;   // top bit of the shifted views
    assign m_meta_reth_va = x_reth[XT -: 64];
    assign m_meta_reth_rkey = x_reth[XT-64 -: 32];
    assign m_meta_reth_len = x_reth[XT-96 -: 32];
    assign m_meta_aeth_syndrome = x_aeth[XT -: 8];
    assign m_meta_aeth_msn = x_aeth[XT-8 -: 24];
    assign m_meta_atomic_va = x_atomic[XT -: 64];
    assign m_meta_atomic_rkey = x_atomic[XT-64 -: 32];
    assign m_meta_atomic_swap_add = x_atomic[XT-96 -: 64];
    assign m_meta_atomic_compare = x_atomic[XT-160 -: 64];
    assign m_meta_atomic_orig = x_aack[XT -: 64];
    assign m_meta_deth_qkey = x_deth[XT -: 32];
    assign m_meta_deth_src_qp = x_deth[XT-40 -: 24];
    assign m_meta_imm = x_imm[XT -: 32];
    assign m_meta_ieth_rkey = x_ieth[XT -: 32];

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXIS_IN("roce_rx_parser in", DATA_WIDTH, KEEP_WIDTH, 1)
    `NIC_CHECK_AXIS_OUT("roce_rx_parser out", DATA_WIDTH, KEEP_WIDTH, 0)

endmodule

`default_nettype wire
