`default_nettype none
`include "nic_common.vh"
// roce_req: the requester of the nsnic RoCEv2 NIC: send WQEs -> RC request packets
// (IBA 9.7.1-9.7.2), the frames nicsim/nic/requester.py builds for the same WQEs.
//
// WQEs arrive decoded from wqe_fetch (which serves the QPs whose SQ doorbells rang, round
// robin); the requester takes one WQE at a time and queues its whole message (headers to the
// framer, payload reads) before the next:
//
//   1. context: reads the QP's words from the QP table (nic_cmd's datapath read port): state,
//      path MTU, pd, send CQ, dest QPN, sq_psn, MACs, GIDs, traffic class; the running PSN
//      comes from the requester's own PSN table unless a command set sq_psn since (then from
//      the table word, sq_psn_set_*). The words read last are kept: the next WQE of the same
//      QP uses them if nic_cmd has been idle since (ctx_idle: no table write came between).
//   2. checks, in the model's order: a QP in ERR (or failed here before) flushes the WQE
//      (WR_FLUSH_ERR); a QP not in RTS (SQD, ...) is waited for; an opcode other than
//      RDMA_WRITE, RDMA_WRITE_WITH_IMM, SEND, SEND_WITH_IMM, RDMA_READ, inline data, more
//      SGEs than MAX_SGE or a WQE read error give LOC_QP_OP_ERR / BAD_OPCODE (CMP_SWAP and
//      FETCH_ADD are done); a new READ or atomic waits while the QP has one outstanding
//      (rd_out, from the completer: max_rd_atomic 1; the context is read again every 256
//      cycles, so a QP failed meanwhile flushes it);
//      every non-empty SGE's lkey is checked through mr_translate (pd, bounds; a READ's or
//      atomic's SGEs need LOCAL_WRITE, the model's check, as the responses are written there):
//      the first failing one gives LOC_PROT_ERR with its vendor code (BAD_LKEY,
//      LKEY_PD_MISMATCH, LKEY_ACCESS, LKEY_BOUNDS); a message over 2^31 bytes, or an atomic
//      whose SGEs do not hold exactly 8 bytes, gives LOC_LEN_ERR. An error
//      completes the WQE on m_cqe (byte_len 0) and marks the QP failed: its later WQEs are
//      flushed until its SQ is configured again (wq_cfg_*: reset, RTS, destroy). (The QP
//      table's state byte is not changed: QUERY_QP still says RTS.)
//   3. PSNs: the message takes max(1, ceil(length / MTU)) PSNs from the running PSN.
//   4. headers: one descriptor per packet, queued (HDR_DEPTH) for the framer (roce_tx):
//      FIRST/MIDDLE/LAST or ONLY
//      opcodes (RC SEND / RDMA WRITE, with immediate on the last), RETH (remote address, rkey,
//      message length) on the first packet of a WRITE, ImmDt on the last, AckReq and (SOLICITED
//      flag) SE on the last, MigReq 1, P_Key 0xFFFF, the QP's path: MACs, IPv4 when both GIDs
//      are IPv4-mapped (else IPv6 with the GIDs, flow label 0), DSCP from the traffic class
//      with ECN ECT(0), TTL / hop limit = traffic_class >> 8 or 64, UDP source port
//      nicsim.wire.roce_udp_sport(qpn, dest_qpn).
//      A READ is one READ REQUEST packet (RETH: remote address, rkey, length; AckReq, no
//      payload) that takes a PSN per response packet; its SGEs and PD go to the responder
//      (rd_sge_*), which places the responses for the completer. A READ asked again from
//      packet k (go-back, IBA 9.7.6.1.3) asks for the rest: PSN + k, address + k * MTU,
//      length - k * MTU.
//      An atomic (IBA 9.4.5) is one COMPARE SWAP or FETCH ADD packet (AtomicETH: remote
//      address, rkey, swap or add value, compare value; AckReq) of one PSN; its SGEs go to the
//      responder as a READ's (rd_sge_*), which writes the ATOMIC ACKNOWLEDGE's original value
//      there for the completer.
//   5. payload: the SGEs are translated again (mr_translate: one segment per page; a WQE
//      whose check answered one segment, one SGE inside a page, uses that answer) and cut
//      into chunks that lie in one segment, one packet and one AXI burst (<= 4 KiB, <= 256
//      beats); dma_rd_stream reads each chunk with one INCR burst (only when its payload FIFO
//      has room for the burst, so R data is always taken: the read channel is shared) and
//      packs the bytes into the framer's payload stream, tlast at the end of each packet.
//
// The next WQE starts when the previous one's descriptors are all queued and its reads all
// issued (the payload FIFO's credits bound the reads in flight); data and frames of consecutive
// messages stream back to back. With the context kept, a one-packet WQE of the same QP takes
// 13 cycles here (1 to take it, 1 to evaluate, 6 for the lkey check through mr_translate, 1,
// 1 to take the start PSN, 1 to start, 2 to queue the header and issue the read).
//
// Parameters:
//   DATA_WIDTH     AXI and payload stream width (64..1024, a power of two)
//   ADDR_WIDTH     physical address width
//   NUM_QP         QP contexts (power of two)
//   QPN_WIDTH      QP number width (24)
//   CQN_WIDTH      CQ number width
//   MAX_SGE        SGEs per WQE (as wqe_fetch)
//   TAG_WIDTH      mr_translate tag width
//   PAY_DEPTH      payload FIFO depth in beats (power of two, >= 2 bursts of a page)
//   META_DEPTH     read bursts in flight (chunk records; power of two)
//   HDR_DEPTH      packet headers queued for the framer (power of two)
//   ECN_CAPABLE    1: frames carry ECT(0) (NicConfig.ecn_capable)
//
// Ports:
//   clk, rst              clock, synchronous active-high reset
//   s_wqe_*               decoded WQEs (wqe_fetch m_wqe_*)
//   ctx_qpn, ctx_word, ctx_data   QP table read port (data one cycle after the address)
//   ctx_idle              the QP table is not being written (nic_cmd idle)
//   sq_psn_set_valid, sq_psn_set_qpn   a command set the QP's sq_psn (reload from the table)
//   wq_cfg_valid, wq_cfg_qpn      the QP's SQ was (re)configured: clears its failed mark
//   mr_req_*, mr_rsp_*    mr_translate lookups (tag 0)
//   m_axi_ar*, m_axi_r*   AXI4 read master (payload)
//   tx_hdr_*              framer descriptor, from the header queue (roce_tx s_hdr_*; fields
//                         not listed are constant)
//   tx_pay_*              framer payload stream (packed)
//   st_mtu_log            with st_*: the QP's path MTU (log2), for the READ responses
//   rd_out                QP q has a READ outstanding (roce_comp)
//   rd_sge_*              a READ started: its QP, PD and SGEs (lengths past num_sge 0)
//   m_cqe_*               completions of WQEs that failed here (to cqe_write)
//   cnt_wqes, cnt_pkts, cnt_bytes, cnt_errors   WQEs taken, packets, payload bytes, error CQEs
module roce_req #(
    parameter DATA_WIDTH = 64,
    parameter ADDR_WIDTH = 64,
    parameter NUM_QP = 64,
    parameter QPN_WIDTH = 24,
    parameter CQN_WIDTH = 24,
    parameter MAX_SGE = 4,
    parameter TAG_WIDTH = 8,
    parameter PAY_DEPTH = 1024,
    parameter META_DEPTH = 16,
    parameter HDR_DEPTH = 16,
    parameter ECN_CAPABLE = 1
) (
    input  wire                          clk,
    input  wire                          rst,

    input  wire                          s_wqe_valid,
    output wire                          s_wqe_ready,
    input  wire [QPN_WIDTH-1:0]          s_wqe_qpn,
    input  wire [15:0]                   s_wqe_index,
    input  wire [7:0]                    s_wqe_opcode,
    input  wire [7:0]                    s_wqe_flags,
    input  wire [7:0]                    s_wqe_num_sge,
    input  wire [31:0]                   s_wqe_imm_inv,
    input  wire [63:0]                   s_wqe_remote_addr,
    input  wire [31:0]                   s_wqe_rkey,
    input  wire [63:0]                   s_wqe_compare_add,
    input  wire [63:0]                   s_wqe_swap,
    input  wire [MAX_SGE*64-1:0]         s_wqe_sge_addr,
    input  wire [MAX_SGE*32-1:0]         s_wqe_sge_len,
    input  wire [MAX_SGE*32-1:0]         s_wqe_sge_lkey,
    input  wire                          s_wqe_err,

    output wire [QPN_WIDTH-1:0]          ctx_qpn,
    output wire [3:0]                    ctx_word,
    input  wire [63:0]                   ctx_data,
    input  wire                          ctx_idle,
    input  wire                          sq_psn_set_valid,
    input  wire [QPN_WIDTH-1:0]          sq_psn_set_qpn,
    input  wire                          wq_cfg_valid,
    input  wire [QPN_WIDTH-1:0]          wq_cfg_qpn,

    input  wire                          rw_valid,
    output wire                          rw_ready,
    input  wire [QPN_WIDTH-1:0]          rw_qpn,
    input  wire [15:0]                   rw_index,
    input  wire [23:0]                   rw_first_psn,
    input  wire [23:0]                   rw_psn,
    output reg                           fetch_rw_valid,
    output reg  [QPN_WIDTH-1:0]          fetch_rw_qpn,
    output reg  [15:0]                   fetch_rw_index,
    input  wire [NUM_QP-1:0]             qp_full,

    output reg                           st_valid,
    output reg                           st_new,
    output reg  [QPN_WIDTH-1:0]          st_qpn,
    output reg  [15:0]                   st_index,
    output reg  [23:0]                   st_first_psn,
    output reg  [23:0]                   st_last_psn,
    output reg  [2:0]                    st_opcode,
    output reg                           st_signaled,
    output reg  [31:0]                   st_length,
    output reg  [CQN_WIDTH-1:0]          st_cqn,
    output reg  [4:0]                    st_timeout,
    output reg  [2:0]                    st_retry_cnt,
    output reg  [2:0]                    st_rnr_retry,
    output reg  [3:0]                    st_mtu_log,
    input  wire [NUM_QP-1:0]             rd_out,

    output reg                           rd_sge_valid,
    output reg  [QPN_WIDTH-1:0]          rd_sge_qpn,
    output reg  [31:0]                   rd_sge_pd,
    output reg  [MAX_SGE*64-1:0]         rd_sge_addr,
    output reg  [MAX_SGE*32-1:0]         rd_sge_len,
    output reg  [MAX_SGE*32-1:0]         rd_sge_lkey,

    output wire                          mr_req_valid,
    input  wire                          mr_req_ready,
    output wire [31:0]                   mr_req_key,
    output wire [31:0]                   mr_req_pd,
    output wire [7:0]                    mr_req_access,
    output wire [63:0]                   mr_req_va,
    output wire [31:0]                   mr_req_len,
    output wire [TAG_WIDTH-1:0]          mr_req_tag,
    input  wire                          mr_rsp_valid,
    output wire                          mr_rsp_ready,
    input  wire [2:0]                    mr_rsp_status,
    input  wire [ADDR_WIDTH-1:0]         mr_rsp_pa,
    input  wire [12:0]                   mr_rsp_len,
    input  wire                          mr_rsp_last,

    `NIC_AXI_RD_MASTER_NOID_PORTS(ADDR_WIDTH, DATA_WIDTH),

    output wire                          tx_hdr_valid,
    input  wire                          tx_hdr_ready,
    output wire [47:0]                   tx_hdr_dmac,
    output wire [47:0]                   tx_hdr_smac,
    output wire                          tx_hdr_ipv6,
    output wire [127:0]                  tx_hdr_sip,
    output wire [127:0]                  tx_hdr_dip,
    output wire [7:0]                    tx_hdr_tos,
    output wire [7:0]                    tx_hdr_ttl,
    output wire [15:0]                   tx_hdr_udp_sport,
    output wire [7:0]                    tx_hdr_opcode,
    output wire                          tx_hdr_solicited,
    output wire [23:0]                   tx_hdr_dqpn,
    output wire                          tx_hdr_ackreq,
    output wire [23:0]                   tx_hdr_psn,
    output wire [63:0]                   tx_hdr_reth_va,
    output wire [31:0]                   tx_hdr_reth_rkey,
    output wire [31:0]                   tx_hdr_reth_len,
    output wire [31:0]                   tx_hdr_imm,
    output wire [63:0]                   tx_hdr_atomic_swap_add,
    output wire [63:0]                   tx_hdr_atomic_compare,
    output wire [15:0]                   tx_hdr_payload_len,

    output wire [DATA_WIDTH-1:0]         tx_pay_tdata,
    output wire [DATA_WIDTH/8-1:0]       tx_pay_tkeep,
    output wire                          tx_pay_tvalid,
    input  wire                          tx_pay_tready,
    output wire                          tx_pay_tlast,
    output wire                          tx_pay_tuser,

    output reg                           m_cqe_valid,
    input  wire                          m_cqe_ready,
    output reg  [CQN_WIDTH-1:0]          m_cqe_cqn,
    output reg  [31:0]                   m_cqe_qpn,
    output reg  [15:0]                   m_cqe_wqe_index,
    output reg  [7:0]                    m_cqe_opcode,
    output reg  [7:0]                    m_cqe_status,
    output reg  [7:0]                    m_cqe_vendor_err,
    output reg                           m_cqe_fail,

    output reg  [31:0]                   cnt_wqes,
    output reg  [31:0]                   cnt_pkts,
    output reg  [31:0]                   cnt_bytes,
    output reg  [31:0]                   cnt_errors,
    output reg  [31:0]                   cnt_resent,
    output reg  [31:0]                   cnt_stale
);

    `NIC_CLOG2_FUNCTION

    localparam KW = DATA_WIDTH / 8;
    localparam QP_AW = clog2(NUM_QP);
    localparam SGE_W = MAX_SGE > 1 ? clog2(MAX_SGE + 1) : 1;
    localparam [SGE_W:0] MAX_SGE_J = MAX_SGE;
    localparam integer BURST_I = 256 * KW < 4096 ? 256 * KW : 4096;   // bytes per burst at most
    localparam BURST_LOG = clog2(BURST_I);

    // hwif values
    localparam [7:0] QPS_RTS = 8'd3;
    localparam [7:0] QPS_ERR = 8'd6;
    localparam [7:0] ST_LOC_LEN_ERR = 8'd1;
    localparam [7:0] ST_LOC_QP_OP_ERR = 8'd2;
    localparam [7:0] ST_LOC_PROT_ERR = 8'd4;
    localparam [7:0] ST_WR_FLUSH_ERR = 8'd5;
    localparam [7:0] VE_BAD_OPCODE = 8'h60;
    localparam [7:0] VE_FLUSHED = 8'h50;

    // ================================================================ per-QP state
    reg [23:0]       psn_mem [0:NUM_QP-1];   // next PSN of each QP
    reg [23:0]       psn_q;
    reg [NUM_QP-1:0] psn_stale;              // sq_psn set by a command: reload from the table
    reg [NUM_QP-1:0] failed;                 // a WQE failed: flush until reconfigured
    // send queue position: the index of the next WQE to execute (WQEs fetched with another
    // index are stale prefetches after a go-back and are dropped), the index after the last
    // new WQE started (below it: a resend), the first PSN of the next resent WQE, the PSN
    // the go-back resends from
    reg [15:0]       exp_idx [0:NUM_QP-1];
    reg [15:0]       sq_tail [0:NUM_QP-1];
    reg [23:0]       rs_psn [0:NUM_QP-1];
    reg [23:0]       rs_from [0:NUM_QP-1];

    // ================================================================ the WQE being executed
    reg [QP_AW-1:0]        w_q;
    reg [QPN_WIDTH-1:0]    w_qpn;
    reg [15:0]             w_index;
    reg [7:0]              w_op;
    reg [7:0]              w_flags;
    reg [7:0]              w_nsge;
    reg [31:0]             w_imm;
    reg [63:0]             w_raddr;
    reg [31:0]             w_rkey;
    reg [63:0]             w_cmpadd;
    reg [63:0]             w_swap;
    reg [MAX_SGE*64-1:0]   w_sge_addr;
    reg [MAX_SGE*32-1:0]   w_sge_len;
    reg [MAX_SGE*32-1:0]   w_sge_lkey;
    reg                    w_err;
    reg [33:0]             w_total;

    // context of its QP
    reg [7:0]   c_state;
    reg [7:0]   c_pmtu;
    reg [31:0]  c_pd;
    reg [31:0]  c_scqn;
    reg [31:0]  c_dqpn;
    reg [4:0]   c_tmo;
    reg [2:0]   c_retry;
    reg [2:0]   c_rnr;
    reg [23:0]  c_sqpsn;
    reg [447:0] c_b;          // Qpc bytes 64..119 (words 8..14), little-endian
    reg [15:0]  c_sport;

    // ================================================================ FSM
    localparam [3:0] R_IDLE = 4'd0;
    localparam [3:0] R_CTX = 4'd1;
    localparam [3:0] R_EVAL = 4'd2;
    localparam [3:0] R_WAIT = 4'd3;
    localparam [3:0] R_CHK = 4'd4;
    localparam [3:0] R_CHKD = 4'd5;
    localparam [3:0] R_CQE = 4'd6;
    localparam [3:0] R_START = 4'd7;
    localparam [3:0] R_RUN = 4'd8;
    localparam [3:0] R_FULL = 4'd9;     // a new WQE waits for room among the outstanding
    localparam [3:0] R_PREP = 4'd10;    // the start PSN and the resend's first packet
    reg [3:0]  state;
    reg [3:0]  ci;            // context word read step (address), 0..10
    reg [3:0]  cd;            // step whose data is in ctx_data
    reg        cd_v;
    reg [8:0]  wait_cnt;

    // context words read: 0 (state, mtu), 1 (pd, send cqn), 5 (dest qpn), 6 (sq_psn), 8..14
    function [3:0] ctx_word_of;
        input [3:0] step;
        begin
            case (step)
                4'd0: ctx_word_of = 4'd0;
                4'd1: ctx_word_of = 4'd1;
                4'd2: ctx_word_of = 4'd5;
                4'd3: ctx_word_of = 4'd6;
                default: ctx_word_of = step + 4'd4;   // 4..10 -> 8..14
            endcase
        end
    endfunction

    assign ctx_qpn = w_qpn;
    assign ctx_word = ctx_word_of(ci);

    // ---------------------------------------------------------------- the path
    wire [47:0]  p_dmac;
    wire [47:0]  p_smac;
    wire         p_ipv6;
    wire [127:0] p_sgid;
    wire [127:0] p_dgid;
    wire [7:0]   p_tos;
    wire [7:0]   p_ttl;
    wire [13:0]  sp_low;
    roce_path #(
        .QPN_WIDTH(QPN_WIDTH),
        .ECN_CAPABLE(ECN_CAPABLE)
    ) u_path (
        .path(c_b),
        .qpn(w_qpn),
        .dqpn(c_dqpn[23:0]),
        .dmac(p_dmac),
        .smac(p_smac),
        .ipv6(p_ipv6),
        .sip(p_sgid),
        .dip(p_dgid),
        .tos(p_tos),
        .ttl(p_ttl),
        .sport_low(sp_low)
    );

    // ---------------------------------------------------------------- the message
    // The path MTU, registered: c_pmtu is read in R_CTX, many cycles before it is used, and
    // the decode would otherwise head the packet-count chain of R_START.
    wire [3:0]  mtu_log_c = (c_pmtu >= 8'd1 && c_pmtu <= 8'd5) ? c_pmtu[3:0] + 4'd7 : 4'd10;
    reg  [3:0]  mtu_log;
    reg  [12:0] mtu;
    always @(posedge clk) begin
        mtu_log <= mtu_log_c;
        mtu <= 13'd1 << mtu_log_c;
    end
    wire        is_read = w_op == 8'd4;
    wire        is_cas = w_op == 8'd5;                   // ATOMIC_CMP_AND_SWP
    wire        is_atomic = is_cas || w_op == 8'd6;      // ... or ATOMIC_FETCH_AND_ADD
    // READ and atomics: one request packet, answered with data written to the local SGEs
    wire        is_rdat = is_read || is_atomic;
    wire        op_ok = w_op == 8'd0 || w_op == 8'd1 || w_op == 8'd2 || w_op == 8'd3 || is_rdat;
    wire        len_bad = is_atomic && w_total != 34'd8;   // an atomic's SGEs hold 8 bytes
    // CqeOpcode of the WQE's opcode (SEND for unknown ones)
    wire [7:0]  cqe_op = (w_op == 8'd0 || w_op == 8'd1) ? 8'd1 :
                         w_op == 8'd4 ? 8'd2 : w_op == 8'd5 ? 8'd3 : w_op == 8'd6 ? 8'd4 : 8'd0;

    // total length of the SGEs
    reg [33:0] sum_len;
    reg [SGE_W:0] n_nz;      // non-empty SGEs (of the first w_nsge)
    integer sj;
    always @* begin
        sum_len = 34'd0;
        n_nz = {(SGE_W+1){1'b0}};
        for (sj = 0; sj < MAX_SGE; sj = sj + 1) begin
            if (sj < w_nsge && w_sge_len[32*sj +: 32] != 32'd0) begin
                sum_len = sum_len + {2'b00, w_sge_len[32*sj +: 32]};
                n_nz = n_nz + 1'b1;
            end
        end
    end

    // ---------------------------------------------------------------- CQE of a failed WQE
    reg [7:0] e_status;
    reg [7:0] e_vendor;
    reg [7:0] e_opcode;

    // ---------------------------------------------------------------- translation requests
    // one requester of mr_translate at a time: the check pass (R_CHK) or the data pass (R_RUN)
    reg [SGE_W:0]  tr_j;        // next SGE to request
    reg            tr_on;       // requests of this pass enabled
    wire [31:0]    tr_len = w_sge_len[32*tr_j[SGE_W-1:0] +: 32];
    wire           tr_more = {{(8-SGE_W-1){1'b0}}, tr_j} < w_nsge && tr_j < MAX_SGE;
    assign mr_req_valid = tr_on && tr_more && tr_len != 32'd0;
    assign mr_req_key = w_sge_lkey[32*tr_j[SGE_W-1:0] +: 32];
    assign mr_req_pd = c_pd;
    assign mr_req_access = is_rdat ? 8'd1 : 8'd0;    // a READ writes its SGEs: LOCAL_WRITE
    assign mr_req_va = w_sge_addr[64*tr_j[SGE_W-1:0] +: 64];
    assign mr_req_len = tr_len;
    assign mr_req_tag = {TAG_WIDTH{1'b0}};
    wire tr_step = tr_on && tr_more && (tr_len == 32'd0 || mr_req_ready);

    // check pass responses
    reg            ck_first;
    reg            ck_bad;
    reg [2:0]      ck_st;
    reg [SGE_W:0]  ck_got;      // requests fully answered
    // the answer was one segment (one non-empty SGE inside a page): the data pass takes it
    // from here instead of asking mr_translate again (7 cycles of a one-packet WQE)
    reg                  ck_one;
    reg [ADDR_WIDTH-1:0] ck_pa;
    reg [12:0]           ck_len;
    wire                 reuse = ck_one && n_nz == {{SGE_W{1'b0}}, 1'b1} && !is_rdat;

    // ---------------------------------------------------------------- data pass: planner
    reg            seg_v;
    reg [ADDR_WIDTH-1:0] seg_pa;
    reg [12:0]     seg_rem;
    reg [31:0]     msg_rem;     // bytes not yet in a chunk
    reg [12:0]     pkt_rem;     // bytes of the current packet not yet in a chunk
    wire           run = state == R_RUN;

    assign mr_rsp_ready = state == R_CHK || (run && !seg_v);

    // bytes to the next burst boundary (BURST_I-aligned: inside a page, <= 256 beats)
    wire [31:0]    pa_low = {{(32-BURST_LOG){1'b0}}, seg_pa[BURST_LOG-1:0]};
    wire [31:0]    to_burst = BURST_I - pa_low;
    reg  [12:0]    ch_len;
    always @* begin
        ch_len = seg_rem;
        if (pkt_rem < ch_len)
            ch_len = pkt_rem;
        if (to_burst < {19'd0, ch_len})
            ch_len = to_burst[12:0];
    end
    wire           ch_last = ch_len == pkt_rem;

    // a resend from packet k0 > 0: the bytes before it are skipped, not read
    wire [12:0] sk_len = {19'd0, seg_rem} > skip ? skip[12:0] : seg_rem;
    wire sk_go = run && seg_v && skip != 32'd0;
    wire ch_ready;
    wire ch_go = run && seg_v && skip == 32'd0 && ch_ready;
    wire [31:0] msg_after = msg_rem - {19'd0, ch_len};
    wire [12:0] next_pkt = msg_after > {19'd0, mtu} ? mtu : msg_after[12:0];
    wire seg_take = run && !seg_v && mr_rsp_valid;

    // ---------------------------------------------------------------- data pass: headers
    reg            hg_on;
    reg [23:0]     hg_k;        // packet index
    reg [31:0]     hg_rem;      // message bytes from this packet on
    reg [23:0]     psn0;
    wire           hg_first = hg_k == 24'd0;
    wire           hg_last = hg_rem <= {19'd0, mtu};
    reg  [7:0]     hg_opc;
    always @* begin
        if (is_read)
            hg_opc = 8'h0c;                          // RDMA READ REQUEST
        else if (is_atomic)
            hg_opc = is_cas ? 8'h13 : 8'h14;         // COMPARE SWAP / FETCH ADD
        else case ({w_op[1:0], hg_first, hg_last})
            4'b0010: hg_opc = 8'h06;                 // WRITE FIRST
            4'b0000: hg_opc = 8'h07;                 // WRITE MIDDLE
            4'b0001: hg_opc = 8'h08;                 // WRITE LAST
            4'b0011: hg_opc = 8'h0a;                 // WRITE ONLY
            4'b0110: hg_opc = 8'h06;
            4'b0100: hg_opc = 8'h07;
            4'b0101: hg_opc = 8'h09;                 // WRITE LAST with immediate
            4'b0111: hg_opc = 8'h0b;                 // WRITE ONLY with immediate
            4'b1010: hg_opc = 8'h00;                 // SEND FIRST
            4'b1000: hg_opc = 8'h01;                 // SEND MIDDLE
            4'b1001: hg_opc = 8'h02;                 // SEND LAST
            4'b1011: hg_opc = 8'h04;                 // SEND ONLY
            4'b1110: hg_opc = 8'h00;
            4'b1100: hg_opc = 8'h01;
            4'b1101: hg_opc = 8'h03;                 // SEND LAST with immediate
            default: hg_opc = 8'h05;                 // SEND ONLY with immediate
        endcase
    end

    // The headers queue for the framer (HDR_DEPTH packets), so the requester goes on to the
    // next WQE while the framer still sends, or waits for the payload of, this one's packets.
    localparam HQ_W = 48 + 48 + 1 + 128 + 128 + 8 + 8 + 16 + 8 + 1 + 24 + 1 + 24 + 64 + 32 +
                      32 + 32 + 16 + 128;
    wire [HQ_W-1:0] hq_in = {
        p_dmac, p_smac, p_ipv6, p_sgid, p_dgid, p_tos, p_ttl, c_sport, hg_opc,
        hg_last && w_flags[2] && !is_rdat,               // SE on the last packet
        c_dqpn[23:0], hg_last, psn0 + hg_k,
        // (a READ asked again from packet k0: the rest of it, IBA 9.7.6.1.3)
        is_read ? w_raddr + {32'd0, skip} : w_raddr, w_rkey,
        is_read ? w_total[31:0] - skip : w_total[31:0], w_imm,
        hg_last ? hg_rem[15:0] : {3'd0, mtu},
        // AtomicETH (IBA 9.3.4; the VA and R_Key in the RETH fields): CMP_SWAP carries the
        // WQE's swap and compare values, FETCH_ADD its add value (compare_add) and 0
        is_cas ? w_swap : w_cmpadd, is_cas ? w_cmpadd : 64'd0};
    wire [HQ_W-1:0] hq_out;
    wire            hq_ready;
    wire [15:0]     hq_count;
    fifo_fwft #(
        .WIDTH(HQ_W),
        .DEPTH(HDR_DEPTH)
    ) u_hq (
        .clk(clk),
        .rst(rst),
        .s_data(hq_in),
        .s_valid(hg_on),
        .s_ready(hq_ready),
        .m_data(hq_out),
        .m_valid(tx_hdr_valid),
        .m_ready(tx_hdr_ready),
        .count(hq_count)
    );
    assign {tx_hdr_dmac, tx_hdr_smac, tx_hdr_ipv6, tx_hdr_sip, tx_hdr_dip, tx_hdr_tos,
            tx_hdr_ttl, tx_hdr_udp_sport, tx_hdr_opcode, tx_hdr_solicited, tx_hdr_dqpn,
            tx_hdr_ackreq, tx_hdr_psn, tx_hdr_reth_va, tx_hdr_reth_rkey, tx_hdr_reth_len,
            tx_hdr_imm, tx_hdr_payload_len, tx_hdr_atomic_swap_add,
            tx_hdr_atomic_compare} = hq_out;
    wire hg_fire = hg_on && hq_ready;

    // a go-back from the completer is taken between WQEs
    assign rw_ready = state == R_IDLE || state == R_FULL;
    wire rw_take = rw_valid && rw_ready;
    wire [QP_AW-1:0] rw_q = rw_qpn[QP_AW-1:0];
    assign s_wqe_ready = state == R_IDLE && !rw_valid;
    wire wqe_take = s_wqe_valid && s_wqe_ready;
    wire w_resend = w_index != sq_tail[w_q];
    wire w_stale = w_index != exp_idx[w_q];

    // npkts of the message, its last packet's bytes (total - (npkts - 1) * MTU), and the PSN
    // it starts at. The message's figures are registers that follow w_total: it is set in
    // R_EVAL, and R_CHK and R_CHKD come before R_PREP and R_START, so they have settled by
    // then; the PSN and the packet a resend starts at are taken in R_PREP, the cycle before
    // R_START. (In one cycle, MTU -> npkts -> first packet -> bytes skipped -> first packet's
    // bytes was a chain of some 90 cells: 26 ns on an ECP5.)
    reg  [33:0] w_pkts;
    reg  [33:0] w_pkts_m1;       // w_pkts - 1
    reg  [12:0] w_last_len;
    always @(posedge clk) begin
        w_pkts <= w_total == 34'd0 ? 34'd1 : (w_total + {21'd0, mtu} - 34'd1) >> mtu_log;
        w_pkts_m1 <= w_pkts - 34'd1;
        w_last_len <= w_total == 34'd0 ? 13'd0
                      : ((w_total[12:0] - 13'd1) & (mtu - 13'd1)) + 13'd1;
    end
    wire [23:0] start_psn = w_resend ? rs_psn[w_q] : psn_stale[w_q] ? c_sqpsn : psn_q;
    // a resend starts at the packet holding the PSN the go-back asked for (if in this WQE)
    wire [23:0] rs_k = rs_from[w_q] - start_psn;
    wire [23:0] k0 = (w_resend && !rs_k[23] && {10'd0, rs_k} < w_pkts) ? rs_k : 24'd0;
    reg  [23:0] start_r;         // start_psn and k0, taken in R_PREP
    reg  [23:0] k0_r;
    wire [31:0] skip0 = {8'd0, k0_r} << mtu_log;
    reg  [31:0] skip;            // message bytes the data pass skips (a resend from packet k0)

    // ================================================================ context cache
    // The context words read last stay valid while nic_cmd leaves the QP table alone: it
    // writes the table only outside its idle state (commands, and the completer's QP-to-ERR
    // requests), and ctx_idle says it is idle. cc_ok is ctx_idle held since the first word's
    // read, so a WQE of the same QP skips R_CTX (11 cycles) when no write came in between.
    reg             cc_ok;
    reg [QP_AW-1:0] cc_q;
    wire cc_hit = cc_ok && ctx_idle && cc_q == s_wqe_qpn[QP_AW-1:0];
    always @(posedge clk) begin
        if (state == R_CTX && ci == 4'd0) begin
            cc_ok <= ctx_idle;
            cc_q <= w_q;
        end else begin
            cc_ok <= cc_ok && ctx_idle;
        end
        if (rst)
            cc_ok <= 1'b0;
        psn_q <= psn_mem[w_q];    // (written only in R_START, two cycles after a WQE's take)
    end

    // ================================================================ FSM
    always @(posedge clk) begin
        cd_v <= 1'b0;
        st_valid <= 1'b0;
        rd_sge_valid <= 1'b0;
        fetch_rw_valid <= 1'b0;
        if (m_cqe_valid && m_cqe_ready)
            m_cqe_valid <= 1'b0;
        if (rw_take) begin     // go back: fetch again from rw_index, send from rw_psn
            exp_idx[rw_q] <= rw_index;
            rs_psn[rw_q] <= rw_first_psn;
            rs_from[rw_q] <= rw_psn;
            fetch_rw_valid <= 1'b1;
            fetch_rw_qpn <= rw_qpn;
            fetch_rw_index <= rw_index;
        end
        if (tr_step)
            tr_j <= tr_j + 1'b1;

        // context words in
        if (cd_v) begin
            case (cd)
                4'd0: begin
                    c_state <= ctx_data[39:32];
                    c_pmtu <= ctx_data[55:48];
                end
                4'd1: begin
                    c_pd <= ctx_data[31:0];
                    c_scqn <= ctx_data[63:32];
                end
                4'd2: begin
                    c_tmo <= ctx_data[4:0];
                    c_retry <= ctx_data[10:8];
                    c_rnr <= ctx_data[18:16];
                    c_dqpn <= ctx_data[63:32];
                end
                4'd3: c_sqpsn <= ctx_data[23:0];
                default: c_b[64*({28'd0, cd} - 32'd4) +: 64] <= ctx_data;
            endcase
        end

        case (state)
            R_IDLE: begin
                if (wqe_take) begin
                    w_q <= s_wqe_qpn[QP_AW-1:0];
                    w_qpn <= s_wqe_qpn;
                    w_index <= s_wqe_index;
                    w_op <= s_wqe_opcode;
                    w_flags <= s_wqe_flags;
                    w_nsge <= s_wqe_num_sge;
                    w_imm <= s_wqe_imm_inv;
                    w_raddr <= s_wqe_remote_addr;
                    w_rkey <= s_wqe_rkey;
                    w_cmpadd <= s_wqe_compare_add;
                    w_swap <= s_wqe_swap;
                    w_sge_addr <= s_wqe_sge_addr;
                    w_sge_len <= s_wqe_sge_len;
                    w_sge_lkey <= s_wqe_sge_lkey;
                    w_err <= s_wqe_err;
                    cnt_wqes <= cnt_wqes + 32'd1;
                    ci <= 4'd0;
                    state <= cc_hit ? R_EVAL : R_CTX;
                end
            end

            R_CTX: begin       // address ci this cycle, data next cycle
                cd <= ci;
                cd_v <= 1'b1;
                ci <= ci + 4'd1;
                if (ci == 4'd10)
                    state <= R_EVAL;
            end

            R_EVAL: begin      // the last word arrives this cycle; decide next cycle
                if (!cd_v) begin
                    w_total <= sum_len;
                    c_sport <= {2'b11, sp_low};
                    e_opcode <= cqe_op;
                    e_vendor <= 8'd0;
                    if (w_stale) begin
                        cnt_stale <= cnt_stale + 32'd1;    // prefetched before a go-back
                        state <= R_IDLE;
                    end else if ((c_state == QPS_ERR || failed[w_q]) && w_resend) begin
                        exp_idx[w_q] <= w_index + 16'd1;   // flushed by the completer already
                        state <= R_IDLE;
                    end else if (c_state == QPS_ERR || failed[w_q]) begin
                        exp_idx[w_q] <= w_index + 16'd1;
                        sq_tail[w_q] <= w_index + 16'd1;
                        e_status <= ST_WR_FLUSH_ERR;
                        e_vendor <= VE_FLUSHED;
                        e_opcode <= 8'd0;
                        state <= R_CQE;
                    end else if (c_state != QPS_RTS) begin
                        wait_cnt <= 9'd0;
                        state <= R_WAIT;
                    end else if (!w_resend && (qp_full[w_q] || (is_rdat && rd_out[w_q]))) begin
                        wait_cnt <= 9'd0;
                        state <= R_FULL;    // (one READ or atomic outstanding per QP)
                    end else if (!op_ok || w_err || w_flags[3] ||
                                 w_nsge > MAX_SGE) begin
                        exp_idx[w_q] <= w_index + 16'd1;
                        sq_tail[w_q] <= w_index + 16'd1;
                        e_status <= ST_LOC_QP_OP_ERR;
                        e_vendor <= VE_BAD_OPCODE;
                        state <= R_CQE;
                    end else begin
                        tr_j <= {(SGE_W+1){1'b0}};
                        tr_on <= 1'b1;
                        ck_first <= 1'b1;
                        ck_one <= 1'b0;
                        ck_bad <= 1'b0;
                        ck_got <= {(SGE_W+1){1'b0}};
                        state <= R_CHK;
                    end
                end
            end

            R_FULL: begin      // OUT WQEs outstanding on the QP: wait (a go-back may come)
                // (the context is read again now and then: a QP that failed meanwhile
                // flushes the WQE; its READ stays outstanding until the QP is reset)
                wait_cnt <= wait_cnt + 9'd1;
                if (rw_take) begin
                    state <= R_EVAL;
                end else if (!qp_full[w_q] && !(is_rdat && rd_out[w_q]) ||
                             wait_cnt == 9'd255) begin
                    ci <= 4'd0;
                    state <= R_CTX;
                end
            end

            R_WAIT: begin      // the QP is not in RTS (SQD, ...): look again later
                wait_cnt <= wait_cnt + 9'd1;
                if (wait_cnt == 9'd255) begin
                    ci <= 4'd0;
                    state <= R_CTX;
                end
            end

            R_CHK: begin       // every non-empty SGE's key checked; responses dropped
                if (mr_rsp_valid) begin
                    ck_first <= mr_rsp_last;
                    ck_one <= ck_first && mr_rsp_last && mr_rsp_status == 3'd0;
                    ck_pa <= mr_rsp_pa;
                    ck_len <= mr_rsp_len;
                    if (ck_first && !ck_bad && mr_rsp_status != 3'd0) begin
                        ck_bad <= 1'b1;
                        ck_st <= mr_rsp_status;
                    end
                    if (mr_rsp_last)
                        ck_got <= ck_got + 1'b1;
                end
                if (!tr_more && ck_got == n_nz && !mr_rsp_valid) begin
                    tr_on <= 1'b0;
                    state <= R_CHKD;
                end
            end

            R_CHKD: begin
                if (ck_bad || w_total > 34'h0_8000_0000 || len_bad) begin
                    exp_idx[w_q] <= w_index + 16'd1;
                    sq_tail[w_q] <= w_index + 16'd1;
                end
                if (ck_bad) begin
                    e_status <= ST_LOC_PROT_ERR;
                    e_vendor <= 8'h0f + {5'd0, ck_st};   // BAD_LKEY 0x10 .. LKEY_BOUNDS 0x13
                    state <= R_CQE;
                end else if (w_total > 34'h0_8000_0000 || len_bad) begin
                    e_status <= ST_LOC_LEN_ERR;
                    state <= R_CQE;
                end else begin
                    state <= R_PREP;
                end
            end

            R_PREP: begin
                start_r <= start_psn;
                k0_r <= k0;
                state <= R_START;
            end

            R_CQE: begin
                if (!m_cqe_valid || m_cqe_ready) begin
                    m_cqe_valid <= 1'b1;
                    m_cqe_cqn <= c_scqn[CQN_WIDTH-1:0];
                    m_cqe_qpn <= {{(32-QPN_WIDTH){1'b0}}, w_qpn};
                    m_cqe_wqe_index <= w_index;
                    m_cqe_opcode <= e_opcode;
                    m_cqe_status <= e_status;
                    m_cqe_vendor_err <= e_vendor;
                    m_cqe_fail <= e_status != ST_WR_FLUSH_ERR;
                    cnt_errors <= cnt_errors + 32'd1;
                    state <= R_IDLE;
                end
            end

            R_START: begin
                psn0 <= start_r;
                if (w_resend) begin
                    rs_psn[w_q] <= start_r + w_pkts[23:0];
                    cnt_resent <= cnt_resent + 32'd1;
                end else begin
                    psn_mem[w_q] <= start_r + w_pkts[23:0];
                    sq_tail[w_q] <= w_index + 16'd1;
                end
                exp_idx[w_q] <= w_index + 16'd1;
                st_valid <= 1'b1;
                st_new <= !w_resend;
                st_qpn <= w_qpn;
                st_index <= w_index;
                st_first_psn <= start_r;
                st_last_psn <= start_r + w_pkts_m1[23:0];
                st_opcode <= cqe_op[2:0];
                st_signaled <= w_flags[0];
                st_length <= w_total[31:0];
                st_cqn <= c_scqn[CQN_WIDTH-1:0];
                st_timeout <= c_tmo;
                st_retry_cnt <= c_retry;
                st_rnr_retry <= c_rnr;
                st_mtu_log <= mtu_log;
                hg_on <= 1'b1;
                hg_k <= k0_r;
                skip <= skip0;
                seg_v <= 1'b0;
                tr_on <= 1'b1;
                if (is_rdat) begin         // one request packet; its SGEs for the responses
                    hg_rem <= 32'd0;
                    msg_rem <= 32'd0;
                    tr_j <= MAX_SGE_J;
                    rd_sge_valid <= 1'b1;
                end else begin
                    hg_rem <= w_total[31:0] - skip0;
                    msg_rem <= w_total[31:0] - skip0;
                    tr_j <= reuse ? MAX_SGE_J : {(SGE_W+1){1'b0}};
                    seg_v <= reuse;
                    seg_pa <= ck_pa;
                    seg_rem <= ck_len;
                end
                // a full packet unless the first is the last (k0 = npkts - 1): then its bytes
                // are the last packet's, whatever k0 is, so no subtract waits for skip0
                pkt_rem <= {10'd0, k0_r} < w_pkts_m1 ? mtu : w_last_len;
                state <= R_RUN;
            end

            default: begin     // R_RUN
                if (hg_fire) begin
                    hg_k <= hg_k + 24'd1;
                    hg_rem <= hg_rem - {19'd0, mtu};
                    cnt_pkts <= cnt_pkts + 32'd1;
                    cnt_bytes <= cnt_bytes + (hg_last ? hg_rem : {19'd0, mtu});
                    if (hg_last)
                        hg_on <= 1'b0;
                end
                if (seg_take) begin
                    seg_v <= mr_rsp_len != 13'd0;
                    seg_pa <= mr_rsp_pa;
                    seg_rem <= mr_rsp_len;
                end
                if (sk_go) begin
                    seg_pa <= seg_pa + {{(ADDR_WIDTH-13){1'b0}}, sk_len};
                    seg_rem <= seg_rem - sk_len;
                    seg_v <= seg_rem != sk_len;
                    skip <= skip - {19'd0, sk_len};
                end
                if (ch_go) begin
                    seg_pa <= seg_pa + {{(ADDR_WIDTH-13){1'b0}}, ch_len};
                    seg_rem <= seg_rem - ch_len;
                    seg_v <= seg_rem != ch_len;
                    msg_rem <= msg_after;
                    pkt_rem <= ch_last ? next_pkt : pkt_rem - ch_len;
                end
                if (!hg_on && msg_rem == 32'd0 && !tr_more) begin
                    tr_on <= 1'b0;
                    state <= R_IDLE;
                end
            end
        endcase

        // the QP's SQ configured (create, RESET, RTS, destroy): it starts at index 0
        if (wq_cfg_valid) begin
            exp_idx[wq_cfg_qpn[QP_AW-1:0]] <= 16'd0;
            sq_tail[wq_cfg_qpn[QP_AW-1:0]] <= 16'd0;
        end
        if (rst) begin
            state <= R_IDLE;
            cd_v <= 1'b0;
            tr_on <= 1'b0;
            hg_on <= 1'b0;
            seg_v <= 1'b0;
            m_cqe_valid <= 1'b0;
            cnt_wqes <= 32'd0;
            cnt_pkts <= 32'd0;
            cnt_bytes <= 32'd0;
            cnt_errors <= 32'd0;
            cnt_resent <= 32'd0;
            cnt_stale <= 32'd0;
            st_valid <= 1'b0;
            rd_sge_valid <= 1'b0;
            fetch_rw_valid <= 1'b0;
        end
    end

    // a READ's SGEs (those past num_sge: no bytes)
    integer rj;
    always @(posedge clk) begin
        rd_sge_qpn <= w_qpn;
        rd_sge_pd <= c_pd;
        rd_sge_addr <= w_sge_addr;
        rd_sge_lkey <= w_sge_lkey;
        for (rj = 0; rj < MAX_SGE; rj = rj + 1)
            rd_sge_len[32*rj +: 32] <= rj < w_nsge ? w_sge_len[32*rj +: 32] : 32'd0;
    end

    // stale / failed marks
    always @(posedge clk) begin : marks
        integer k;
        for (k = 0; k < NUM_QP; k = k + 1) begin
            if (rst) begin
                psn_stale[k] <= 1'b1;
                failed[k] <= 1'b0;
            end else begin
                if (sq_psn_set_valid && sq_psn_set_qpn[QP_AW-1:0] == k[QP_AW-1:0])
                    psn_stale[k] <= 1'b1;
                else if (state == R_START && w_q == k[QP_AW-1:0])
                    psn_stale[k] <= 1'b0;
                if (wq_cfg_valid && wq_cfg_qpn[QP_AW-1:0] == k[QP_AW-1:0])
                    failed[k] <= 1'b0;
                else if (state == R_CQE && w_q == k[QP_AW-1:0] &&
                         (!m_cqe_valid || m_cqe_ready))
                    failed[k] <= 1'b1;
            end
        end
    end

    // ================================================================ read bursts
    wire rd_busy;
    dma_rd_stream #(
        .DATA_WIDTH(DATA_WIDTH),
        .ADDR_WIDTH(ADDR_WIDTH),
        .PAY_DEPTH(PAY_DEPTH),
        .META_DEPTH(META_DEPTH)
    ) u_rd (
        .clk(clk),
        .rst(rst),
        .s_ch_valid(run && seg_v && skip == 32'd0),
        .s_ch_ready(ch_ready),
        .s_ch_addr(seg_pa),
        .s_ch_len(ch_len),
        .s_ch_last(ch_last),
        .m_axi_araddr(m_axi_araddr),
        .m_axi_arlen(m_axi_arlen),
        .m_axi_arsize(m_axi_arsize),
        .m_axi_arburst(m_axi_arburst),
        .m_axi_arvalid(m_axi_arvalid),
        .m_axi_arready(m_axi_arready),
        .m_axi_rdata(m_axi_rdata),
        .m_axi_rresp(m_axi_rresp),
        .m_axi_rlast(m_axi_rlast),
        .m_axi_rvalid(m_axi_rvalid),
        .m_axi_rready(m_axi_rready),
        .m_axis_tdata(tx_pay_tdata),
        .m_axis_tkeep(tx_pay_tkeep),
        .m_axis_tvalid(tx_pay_tvalid),
        .m_axis_tready(tx_pay_tready),
        .m_axis_tlast(tx_pay_tlast),
        .m_axis_tuser(tx_pay_tuser),
        .busy(rd_busy)
    );

    // Not used: the stream's busy flag (the requester keeps its own count), the QPN bits
    // above the context tables' index, the WQE flags but SIGNALED, SOLICITED and INLINE
    // (refused: the RTL has no inline data; FENCE is not kept, hwif.WqeFlags), and the
    // widths kept for the counters' sake.
    /* verilator lint_off UNUSEDSIGNAL */
    wire unused = &{1'b0, c_scqn[31:CQN_WIDTH], w_total[33:32], to_burst[31:13],
                    c_dqpn[31:24], hg_rem[31:16], w_pkts[33:24], w_pkts_m1[33:24], hq_count,
                    rd_busy, sq_psn_set_qpn, wq_cfg_qpn, w_flags};
    /* verilator lint_on UNUSEDSIGNAL */

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXI_RD_MASTER_NOID("roce_req DMA", ADDR_WIDTH, DATA_WIDTH)

endmodule
`default_nettype wire
