`default_nettype none
// roce_path: the headers of a QP's packets from its path (Qpc bytes 64..119, hwif QpPath) and
// its QP numbers, shared by the requester and the responder (both send for the QP).
//
//   path     Qpc bytes 64..119, byte 64 in bits 7:0: dmac, smac, sgid, dgid (network order),
//            traffic class word (bits 7:0 DSCP << 2, 15:8 hop limit, 0: 64)
//   qpn, dqpn            the QP and the peer's QP: the UDP source port hash
//   sport_low            nicsim.wire.roce_udp_sport(qpn, dqpn) without its two top bits (11)
//   ipv6                 not both GIDs IPv4-mapped (::ffff:a.b.c.d)
module roce_path #(
    parameter QPN_WIDTH = 24,
    parameter ECN_CAPABLE = 1
) (
    input  wire [447:0]          path,
    input  wire [QPN_WIDTH-1:0]  qpn,
    input  wire [23:0]           dqpn,
    output reg  [47:0]           dmac,
    output reg  [47:0]           smac,
    output wire                  ipv6,
    output reg  [127:0]          sip,
    output reg  [127:0]          dip,
    output wire [7:0]            tos,
    output wire [7:0]            ttl,
    output wire [13:0]           sport_low
);
    wire [31:0] tc = path[8*48 +: 32];
    integer bi;
    always @* begin
        for (bi = 0; bi < 6; bi = bi + 1) begin
            dmac[8*(5-bi) +: 8] = path[8*(bi + 0) +: 8];
            smac[8*(5-bi) +: 8] = path[8*(bi + 6) +: 8];
        end
        for (bi = 0; bi < 16; bi = bi + 1) begin
            sip[8*(15-bi) +: 8] = path[8*(bi + 12) +: 8];
            dip[8*(15-bi) +: 8] = path[8*(bi + 28) +: 8];
        end
    end
    wire s_mapped = sip[127:32] == 96'h0000_0000_0000_0000_0000_ffff;
    wire d_mapped = dip[127:32] == 96'h0000_0000_0000_0000_0000_ffff;
    assign ipv6 = !(s_mapped && d_mapped);
    assign tos = {tc[7:2], ECN_CAPABLE ? 2'b10 : 2'b00};
    assign ttl = tc[15:8] == 8'd0 ? 8'd64 : tc[15:8];

    /* verilator lint_off UNUSEDSIGNAL */
    wire [55:0] qpn_w = {{(56-QPN_WIDTH){1'b0}}, qpn};
    wire [55:0] sp_v = qpn_w * {32'd0, dqpn};
    wire [55:0] sp_v1 = sp_v ^ (sp_v >> 20);
    wire [55:0] sp_v2 = sp_v1 ^ (sp_v1 >> 40);
    wire unused = &{1'b0, tc[31:16], tc[1:0]};
    /* verilator lint_on UNUSEDSIGNAL */
    assign sport_low = sp_v2[13:0] ^ {8'd0, sp_v2[19:14]};
endmodule
`default_nettype wire
