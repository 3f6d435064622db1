`default_nettype none
`include "nic_common.vh"
// roce_comp: the completer of the nsnic RoCEv2 NIC (IBA 9.7.6), as nicsim/nic/completer.py:
// ACKs and NAKs from the responder complete the requester's outstanding WQEs in order, write
// their CQEs, and send the requester back (go-back-N) when something was lost.
//
// Outstanding WQEs: the requester reports every WQE it starts (st_*): a new one is recorded
// (first and last PSN, CQE opcode, signaled, length) at {QP, index mod OUT} and becomes the
// QP's tail; the QP's head is the oldest WQE not yet completed. A QP has at most OUT WQEs
// outstanding (qp_full tells the requester to wait).
//
// Events, one at a time:
//   ACK (AETH class 0) for PSN p: every outstanding WQE whose last PSN is at or before p
//     completes (a CQE, SUCCESS, if it was signaled), the QP's acknowledged PSN moves to p;
//     on progress the retry budgets are refilled and the transport timer restarted.
//   NAK PSN sequence error for p: completes through p - 1, then goes back to p (unless a
//     go-back to p or before is already pending: redundant), spending one retry.
//   RNR NAK for p: completes through p - 1, then (rnr_retry 7: forever; else while rnr budget
//     lasts, else RNR_RETRY_EXC_ERR) waits the RNR timer of the NAK (IBA table 45) and goes
//     back to p; the transport timer is stopped meanwhile.
//   NAK invalid request / remote access / remote operation / invalid RD request (codes 1-4,
//     others as remote operation): the WQEs before p complete, the one at p completes with
//     REM_INV_REQ_ERR / REM_ACCESS_ERR / REM_OP_ERR / REM_INV_RD_REQ_ERR (vendor REMOTE_NAK),
//     and the QP fails.
//   transport timer (4.096 us << timeout, not with timeout 0): goes back to the first
//     unacknowledged PSN, spending one retry; with none left the oldest WQE completes with
//     RETRY_EXC_ERR (vendor RETRY_EXCEEDED) and the QP fails.
//   a local error from the requester (lc_*): the outstanding WQEs are flushed, the failed
//     WQE completes with the requester's status, and the QP fails; a flush from the requester
//     (a WQE of a failed QP) just completes.
//   A QP fails: every outstanding WQE completes WR_FLUSH_ERR (vendor FLUSHED, opcode SEND),
//   and the QP table is set to ERR (qp_err_*, through nic_cmd).
// Going back to PSN p: the WQE holding p is found from the head, and the requester is asked
// (rw_*) to fetch the SQ again from that WQE's index and to start sending at p.
//   READ RESPONSE for PSN p (IBA 9.7.6.1.3, the model's Completer._read_response): the
//     SENDs and WRITEs before p complete; then for the READ at the head (one READ per QP is
//     outstanding: rd_out holds the requester's next READ), in PSN order: a response it has
//     had, or for no READ, is dropped (cnt_unexpected); one past the next expected asks
//     again from the missing one (go-back, once per gap); the expected one must carry one
//     MTU (the last: the rest of the length) with the opcode's FIRST/MIDDLE vs LAST/ONLY
//     and the pad that fits, else the READ fails BAD_RESP_ERR; its payload is placed
//     (pl_*: by the responder's write engine at the READ's byte offset; a translation that
//     fails: LOC_PROT_ERR / BAD_LKEY, the QP fails); the acknowledged PSN moves to p, and
//     the last response completes the READ (CQE RDMA_READ, the length). Every READ response
//     with a payload gets one pl_* word (place or drop), in arrival order.
//   An ACK at or past the last PSN of the READ at the head, before its last response, means
//     a response was lost: go back to the first response missing (once per gap); the
//     transport timer goes back there too. (The go-back spends a retry after the ACK's
//     progress refilled the budget; the model spends it first.)
//   ATOMIC ACKNOWLEDGE for PSN p (the model's Completer._atomic_ack): the SENDs and WRITEs
//     before p complete; if the atomic (CMP_SWAP / FETCH_ADD, one outstanding per QP as a
//     READ, rd_out) at the head has PSN p, its original value (AtomicAckETH, s_rsp_orig) is
//     placed in its 8-byte SGEs (pl_atomic: the 8 bytes from pl_data, little-endian as the
//     model writes them, not from the payload stream) and it completes (CQE COMP_SWAP /
//     FETCH_ADD, 8 bytes); any other (a duplicate) is dropped (cnt_unexpected). ACKs past
//     it, the transport timer and go-backs treat it as a READ whose response is missing:
//     the request is sent again with its PSN, and the responder answers it from the value
//     it remembered (IBA 9.7.5.1.1), so the memory changes once.
// Responses for a QP with nothing outstanding are ignored (cnt_unexpected).
//
// Timers: a free-running cycle counter; each QP's deadline is looked at once every NUM_QP
// cycles (a scan), so a timer fires up to NUM_QP cycles after its deadline.
//
// Parameters:
//   NUM_QP      QPs (power of two)
//   QPN_WIDTH   QP number width
//   CQN_WIDTH   CQ number width
//   OUT         outstanding WQEs per QP (power of two)
//   CLK_NS_LOG2 log2 of the clock period in ns (timer lengths; 2: 4 ns, 250 MHz)
//
// Ports:
//   s_rsp_*     response packets (ACK/NAK, READ response, atomic ACK): qpn, opcode, psn,
//               AETH syndrome, payload length, pad count, AtomicAckETH original value
//   st_*        a WQE started by the requester: new (recorded) or a resend; its QP's send CQ,
//               timeout, retry_cnt, rnr_retry
//   st_mtu_log  with st_*: the QP's path MTU (log2)
//   rd_out      QP q has a READ outstanding (set when the requester starts one, cleared
//               when it completes or the QP is configured; a failed QP keeps it)
//   pl_*        the verdict on a READ response's payload (to roce_resp): drop it, or place
//               pl_len bytes at offset pl_off of the QP's READ buffers; pl_atomic: place the
//               8 bytes of pl_data (an atomic's original value; no payload in the stream)
//   plr_*       the placement is done (its writes answered) or failed (translation)
//   lc_*        a completion the requester makes (local error: fails the QP; flush)
//   xf_*        the QP fails elsewhere (the responder sent a fatal NAK): flush, ERR
//   rw_*        go back: QP, WQE index, the WQE's first PSN, the PSN to resend from
//   qp_full     QP q has OUT WQEs outstanding
//   cfg_valid, cfg_qpn   the QP's SQ was configured (create, RESET, RTS, destroy): forget it
//   m_cqe_*     completions (to cqe_write)
//   qp_err_*    set a QP's state to ERR (nic_cmd)
//   cnt_*       ACKs, NAKs, timeouts, resends (go-backs), CQEs, unexpected responses
module roce_comp #(
    parameter NUM_QP = 64,
    parameter QPN_WIDTH = 24,
    parameter CQN_WIDTH = 24,
    parameter OUT = 32,
    parameter CLK_NS_LOG2 = 2
) (
    input  wire                   clk,
    input  wire                   rst,

    input  wire                   s_rsp_valid,
    output wire                   s_rsp_ready,
    input  wire [QPN_WIDTH-1:0]   s_rsp_qpn,
    input  wire [7:0]             s_rsp_opcode,
    input  wire [23:0]            s_rsp_psn,
    input  wire [7:0]             s_rsp_syndrome,
    input  wire [15:0]            s_rsp_payload_len,
    input  wire [1:0]             s_rsp_padcount,
    input  wire [63:0]            s_rsp_orig,

    input  wire                   st_valid,
    input  wire                   st_new,
    input  wire [QPN_WIDTH-1:0]   st_qpn,
    input  wire [15:0]            st_index,
    input  wire [23:0]            st_first_psn,
    input  wire [23:0]            st_last_psn,
    input  wire [2:0]             st_opcode,
    input  wire                   st_signaled,
    input  wire [31:0]            st_length,
    input  wire [CQN_WIDTH-1:0]   st_cqn,
    input  wire [4:0]             st_timeout,
    input  wire [2:0]             st_retry_cnt,
    input  wire [2:0]             st_rnr_retry,
    input  wire [3:0]             st_mtu_log,
    output reg  [NUM_QP-1:0]      rd_out,

    output reg                    pl_valid,
    input  wire                   pl_ready,
    output reg  [QPN_WIDTH-1:0]   pl_qpn,
    output reg                    pl_drop,
    output reg  [31:0]            pl_off,
    output reg  [15:0]            pl_len,
    output reg                    pl_atomic,
    output reg  [63:0]            pl_data,
    input  wire                   plr_valid,
    input  wire                   plr_ok,

    input  wire                   lc_valid,
    output wire                   lc_ready,
    input  wire                   lc_fail,
    input  wire [CQN_WIDTH-1:0]   lc_cqn,
    input  wire [QPN_WIDTH-1:0]   lc_qpn,
    input  wire [15:0]            lc_index,
    input  wire [7:0]             lc_opcode,
    input  wire [7:0]             lc_status,
    input  wire [7:0]             lc_vendor,

    input  wire                   xf_valid,
    output wire                   xf_ready,
    input  wire [QPN_WIDTH-1:0]   xf_qpn,

    output reg                    rw_valid,
    input  wire                   rw_ready,
    output reg  [QPN_WIDTH-1:0]   rw_qpn,
    output reg  [15:0]            rw_index,
    output reg  [23:0]            rw_first_psn,
    output reg  [23:0]            rw_psn,

    output wire [NUM_QP-1:0]      qp_full,

    input  wire                   cfg_valid,
    input  wire [QPN_WIDTH-1:0]   cfg_qpn,

    output reg                    m_cqe_valid,
    input  wire                   m_cqe_ready,
    output reg  [CQN_WIDTH-1:0]   m_cqe_cqn,
    output reg  [31:0]            m_cqe_qpn,
    output reg  [15:0]            m_cqe_wqe_index,
    output reg  [7:0]             m_cqe_opcode,
    output reg  [7:0]             m_cqe_status,
    output reg  [31:0]            m_cqe_byte_len,
    output reg  [7:0]             m_cqe_vendor_err,

    output reg                    qp_err_valid,
    input  wire                   qp_err_ready,
    output reg  [QPN_WIDTH-1:0]   qp_err_qpn,

    output reg  [31:0]            cnt_acks,
    output reg  [31:0]            cnt_naks,
    output reg  [31:0]            cnt_timeouts,
    output reg  [31:0]            cnt_resends,
    output reg  [31:0]            cnt_cqes,
    output reg  [31:0]            cnt_unexpected
);

    `NIC_CLOG2_FUNCTION

    localparam QP_AW = NUM_QP > 1 ? clog2(NUM_QP) : 1;
    localparam OUT_AW = clog2(OUT);
    localparam REC_W = 24 + 24 + 3 + 1 + 32;    // {length, signaled, opcode, last, first}
    localparam [16:0] OUT17 = OUT;

    // hwif values
    localparam [7:0] CS_SUCCESS = 8'd0;
    localparam [7:0] CS_WR_FLUSH_ERR = 8'd5;
    localparam [7:0] CS_REM_INV_REQ_ERR = 8'd9;
    localparam [7:0] CS_REM_ACCESS_ERR = 8'd10;
    localparam [7:0] CS_REM_OP_ERR = 8'd11;
    localparam [7:0] CS_RETRY_EXC_ERR = 8'd12;
    localparam [7:0] CS_RNR_RETRY_EXC_ERR = 8'd13;
    localparam [7:0] CS_REM_INV_RD_REQ_ERR = 8'd15;
    localparam [7:0] CS_LOC_PROT_ERR = 8'd4;
    localparam [7:0] CS_BAD_RESP_ERR = 8'd7;
    localparam [7:0] VE_BAD_LKEY = 8'h10;
    localparam [2:0] OP_READ = 3'd2;            // CqeOpcode.RDMA_READ
    localparam [2:0] OP_CMP_SWAP = 3'd3;        // CqeOpcode.COMP_SWAP
    localparam [2:0] OP_FETCH_ADD = 3'd4;       // CqeOpcode.FETCH_ADD
    localparam [7:0] VE_REMOTE_NAK = 8'h30;
    localparam [7:0] VE_RETRY_EXCEEDED = 8'h40;
    localparam [7:0] VE_RNR_EXCEEDED = 8'h41;
    localparam [7:0] VE_FLUSHED = 8'h50;

    // 24-bit serial-number comparisons (IBA 9.7.1)
    function psn_gt;    // a after b
        input [23:0] a;
        input [23:0] b;
        reg [23:0] d;
        begin
            d = a - b;
            psn_gt = d != 24'd0 && !d[23];
        end
    endfunction
    function psn_ge;    // a at or after b
        input [23:0] a;
        input [23:0] b;
        begin
            psn_ge = ((a - b) & 24'h800000) == 24'd0;
        end
    endfunction

    // RNR timer (IBA table 45) in ns
    function [39:0] rnr_ns;
        input [4:0] code;
        begin
            case (code)
                5'd0: rnr_ns = 40'd655360000;
                5'd1: rnr_ns = 40'd10000;
                5'd2: rnr_ns = 40'd20000;
                5'd3: rnr_ns = 40'd30000;
                5'd4: rnr_ns = 40'd40000;
                5'd5: rnr_ns = 40'd60000;
                5'd6: rnr_ns = 40'd80000;
                5'd7: rnr_ns = 40'd120000;
                5'd8: rnr_ns = 40'd160000;
                5'd9: rnr_ns = 40'd240000;
                5'd10: rnr_ns = 40'd320000;
                5'd11: rnr_ns = 40'd480000;
                5'd12: rnr_ns = 40'd640000;
                5'd13: rnr_ns = 40'd960000;
                5'd14: rnr_ns = 40'd1280000;
                5'd15: rnr_ns = 40'd1920000;
                5'd16: rnr_ns = 40'd2560000;
                5'd17: rnr_ns = 40'd3840000;
                5'd18: rnr_ns = 40'd5120000;
                5'd19: rnr_ns = 40'd7680000;
                5'd20: rnr_ns = 40'd10240000;
                5'd21: rnr_ns = 40'd15360000;
                5'd22: rnr_ns = 40'd20480000;
                5'd23: rnr_ns = 40'd30720000;
                5'd24: rnr_ns = 40'd40960000;
                5'd25: rnr_ns = 40'd61440000;
                5'd26: rnr_ns = 40'd81920000;
                5'd27: rnr_ns = 40'd122880000;
                5'd28: rnr_ns = 40'd163840000;
                5'd29: rnr_ns = 40'd245760000;
                5'd30: rnr_ns = 40'd327680000;
                default: rnr_ns = 40'd491520000;
            endcase
        end
    endfunction

    // ---------------------------------------------------------------- per-QP state
    reg [15:0]          head [0:NUM_QP-1];
    reg [15:0]          tail [0:NUM_QP-1];
    reg [NUM_QP-1:0]    acked_v;
    reg [23:0]          acked [0:NUM_QP-1];
    reg [2:0]           retry_left [0:NUM_QP-1];
    reg [2:0]           rnr_left [0:NUM_QP-1];
    reg [2:0]           retry_cnt [0:NUM_QP-1];
    reg [2:0]           rnr_retry [0:NUM_QP-1];
    reg [4:0]           tmo [0:NUM_QP-1];
    reg [CQN_WIDTH-1:0] scq [0:NUM_QP-1];
    reg [NUM_QP-1:0]    known;      // st_* seen since the QP was configured
    reg [NUM_QP-1:0]    armed;      // a timer runs
    reg [NUM_QP-1:0]    rnr_wait;   // ... and it is the RNR wait (else transport)
    reg [47:0]          deadline [0:NUM_QP-1];
    reg [23:0]          rnr_psn [0:NUM_QP-1];
    reg [NUM_QP-1:0]    rw_pend;    // a go-back is asked of the requester, not yet taken
    reg [23:0]          rw_pend_psn [0:NUM_QP-1];
    // the QP's outstanding READ (one at most: the requester waits on rd_out): responses
    // taken in order (rr_k), bytes placed (rr_done), a gap already asked for again (rr_gap)
    reg [23:0]          rr_k [0:NUM_QP-1];
    reg [31:0]          rr_done [0:NUM_QP-1];
    reg [NUM_QP-1:0]    rr_gap;
    reg [3:0]           mtu_l [0:NUM_QP-1];

    reg [47:0] now;                 // cycles since reset

    // outstanding WQE records
    reg [REC_W-1:0] rec_mem [0:NUM_QP*OUT-1];
    reg [REC_W-1:0] rec_q;
    reg [QP_AW-1:0] rd_q;
    reg [15:0]      rd_i;

    wire [QP_AW-1:0] st_q = st_qpn[QP_AW-1:0];
    always @(posedge clk) begin
        if (st_valid && st_new)
            rec_mem[{st_q, st_index[OUT_AW-1:0]}] <= {st_length, st_signaled, st_opcode,
                                                       st_last_psn, st_first_psn};
        rec_q <= rec_mem[{rd_q, rd_i[OUT_AW-1:0]}];
    end
    wire [23:0] r_first = rec_q[23:0];
    wire [23:0] r_last = rec_q[47:24];
    wire [2:0]  r_op = rec_q[50:48];
    wire        r_sig = rec_q[51];
    wire [31:0] r_len = rec_q[83:52];
    // a READ or atomic: answered by its own response (with data), not by ACKs
    wire        r_rdat = r_op == OP_READ || r_op == OP_CMP_SWAP || r_op == OP_FETCH_ADD;
    wire        r_atomic = r_op == OP_CMP_SWAP || r_op == OP_FETCH_ADD;

    genvar g;
    generate
        for (g = 0; g < NUM_QP; g = g + 1) begin : g_full
            wire [15:0] n_out = tail[g] - head[g];
            assign qp_full[g] = {1'b0, n_out} >= OUT17;
        end
    endgenerate

    // ---------------------------------------------------------------- the event FSM
    localparam [4:0] F_IDLE = 5'd0;
    localparam [4:0] F_RSP = 5'd1;      // response decoded (q latched)
    localparam [4:0] F_CT_RD = 5'd2;    // complete-through: read the head record
    localparam [4:0] F_CT = 5'd3;       // ... decide on it
    localparam [4:0] F_CQE = 5'd4;      // emit the CQE in c_* then go to c_next
    localparam [4:0] F_AFTER = 5'd5;    // after a complete-through: progress, then the rest
    localparam [4:0] F_FU_RD = 5'd6;    // first unacknowledged PSN: read the head record
    localparam [4:0] F_FU = 5'd7;
    localparam [4:0] F_RETRY = 5'd8;    // go back to g_psn if the budget allows
    localparam [4:0] F_RW_RD = 5'd9;    // find the WQE holding g_psn
    localparam [4:0] F_RW = 5'd10;
    localparam [4:0] F_RW_OUT = 5'd11;  // hand the go-back to the requester
    localparam [4:0] F_FAIL_RD = 5'd12; // fail at g_psn: the WQEs before it complete
    localparam [4:0] F_FAIL = 5'd13;
    localparam [4:0] F_FLUSH_RD = 5'd14;// the QP fails: flush every outstanding WQE
    localparam [4:0] F_FLUSH = 5'd15;
    localparam [4:0] F_ERR = 5'd16;     // set the QP table to ERR
    localparam [4:0] F_LOCAL = 5'd17;   // a requester's completion after the flush
    localparam [4:0] F_TMO = 5'd18;     // a timer expired
    localparam [4:0] F_RR = 5'd19;      // a READ response (after the WQEs before it completed)
    localparam [4:0] F_PLD = 5'd20;     // hand its payload to the placement (place or drop)
    localparam [4:0] F_RRW = 5'd21;     // its bytes placed (or not)
    localparam [4:0] F_RRD = 5'd22;     // it is taken: the READ advances or completes

    reg [4:0]        fs;
    reg [4:0]        c_next;
    reg [QP_AW-1:0]  q;
    reg [QPN_WIDTH-1:0] qpn;
    reg [23:0]       e_psn;      // the event's PSN
    reg [7:0]        e_syn;
    reg [23:0]       g_psn;      // go back to / fail at
    reg [1:0]        ct_mode;    // after complete-through: 0 done (ACK), 1 NAK seq, 2 RNR,
                                 // 3 READ response
    reg              imp;        // an ACK past an unanswered READ: go back to it (9.7.6.1.3)
    reg [7:0]        e_op;
    reg [15:0]       e_plen;
    reg [63:0]       e_orig;     // ATOMIC ACKNOWLEDGE: the original value
    wire             e_atack = e_op == 8'h12;
    reg [1:0]        e_pad;
    wire             e_rdrsp = e_op >= 8'h0d && e_op <= 8'h10;
    wire             e_rdlast = e_op == 8'h0f || e_op == 8'h10;
    reg              moved;
    reg [7:0]        f_status;
    reg [7:0]        f_vendor;
    reg              f_head;     // fail: the head WQE completes with f_status
    reg              lc_pend;    // F_LOCAL: the requester's completion still to write
    reg [CQN_WIDTH-1:0] lc_cqn_r;
    reg [15:0]       lc_index_r;
    reg [7:0]        lc_opcode_r;
    reg [7:0]        lc_status_r;
    reg [7:0]        lc_vendor_r;

    // scan for expired timers
    reg [QP_AW-1:0]  sc_q;
    wire             sc_hit = armed[sc_q] && now >= deadline[sc_q];

    wire idle = fs == F_IDLE && !m_cqe_valid;
    assign lc_ready = idle;
    assign xf_ready = idle && !lc_valid;
    wire take_xf = xf_valid && xf_ready;
    assign s_rsp_ready = idle && !lc_valid && !xf_valid;
    wire take_lc = lc_valid && lc_ready;
    wire take_rsp = s_rsp_valid && s_rsp_ready;
    wire take_tmo = idle && !lc_valid && !xf_valid && !s_rsp_valid && sc_hit;

    wire [15:0] h = head[q];
    wire [15:0] t = tail[q];
    wire        any_out = h != t;

    // timer length of QP q in cycles: 4096 ns << timeout
    wire [47:0] tmo_cycles = (48'd4096 << tmo[q]) >> CLK_NS_LOG2;
    wire [47:0] rnr_cycles = {8'd0, rnr_ns(e_syn[4:0])} >> CLK_NS_LOG2;

    // the CQE to write for the record in rec_q (head of q)
    task cqe_rec;
        input [7:0] status;
        input [7:0] vendor;
        begin
            m_cqe_cqn <= scq[q];
            m_cqe_qpn <= {{(32-QPN_WIDTH){1'b0}}, qpn};
            m_cqe_wqe_index <= h;
            m_cqe_opcode <= {5'd0, r_op};
            m_cqe_status <= status;
            m_cqe_byte_len <= r_len;
            m_cqe_vendor_err <= vendor;
        end
    endtask

    integer k;
    always @(posedge clk) begin
        now <= now + 48'd1;
        sc_q <= sc_q + 1'b1;
        if (m_cqe_valid && m_cqe_ready) begin
            m_cqe_valid <= 1'b0;
            cnt_cqes <= cnt_cqes + 32'd1;
        end
        if (rw_valid && rw_ready)
            rw_valid <= 1'b0;
        if (pl_valid && pl_ready)
            pl_valid <= 1'b0;
        if (qp_err_valid && qp_err_ready)
            qp_err_valid <= 1'b0;

        // the requester starts a WQE: record, tail, parameters, the timer
        if (st_valid) begin
            if (st_new)
                tail[st_q] <= st_index + 16'd1;
            scq[st_q] <= st_cqn;
            tmo[st_q] <= st_timeout;
            retry_cnt[st_q] <= st_retry_cnt;
            rnr_retry[st_q] <= st_rnr_retry;
            mtu_l[st_q] <= st_mtu_log;
            if (st_new && (st_opcode == OP_READ || st_opcode == OP_CMP_SWAP ||
                           st_opcode == OP_FETCH_ADD))
                rd_out[st_q] <= 1'b1;
            known[st_q] <= 1'b1;
            if (!known[st_q]) begin
                retry_left[st_q] <= st_retry_cnt;
                rnr_left[st_q] <= st_rnr_retry;
            end
            if (!armed[st_q] && st_timeout != 5'd0) begin
                armed[st_q] <= 1'b1;
                rnr_wait[st_q] <= 1'b0;
                deadline[st_q] <= now + ((48'd4096 << st_timeout) >> CLK_NS_LOG2);
            end
        end

        case (fs)
            F_IDLE: begin
                if (take_lc) begin
                    q <= lc_qpn[QP_AW-1:0];
                    qpn <= lc_qpn;
                    lc_cqn_r <= lc_cqn;
                    lc_index_r <= lc_index;
                    lc_opcode_r <= lc_opcode;
                    lc_status_r <= lc_status;
                    lc_vendor_r <= lc_vendor;
                    lc_pend <= 1'b1;
                    if (lc_fail) begin
                        f_head <= 1'b0;
                        rd_q <= lc_qpn[QP_AW-1:0];
                        rd_i <= head[lc_qpn[QP_AW-1:0]];
                        fs <= F_FLUSH_RD;
                    end else begin
                        fs <= F_LOCAL;
                    end
                end else if (take_xf) begin
                    q <= xf_qpn[QP_AW-1:0];
                    qpn <= xf_qpn;
                    lc_pend <= 1'b0;
                    rd_q <= xf_qpn[QP_AW-1:0];
                    rd_i <= head[xf_qpn[QP_AW-1:0]];
                    fs <= F_FLUSH_RD;
                end else if (take_rsp) begin
                    q <= s_rsp_qpn[QP_AW-1:0];
                    qpn <= s_rsp_qpn;
                    e_psn <= s_rsp_psn;
                    e_syn <= s_rsp_syndrome;
                    e_op <= s_rsp_opcode;
                    e_plen <= s_rsp_payload_len;
                    e_pad <= s_rsp_padcount;
                    e_orig <= s_rsp_orig;
                    imp <= 1'b0;
                    if (s_rsp_opcode >= 8'h0d && s_rsp_opcode <= 8'h10) begin
                        fs <= F_RSP;            // (its payload must be placed or dropped)
                    end else if ({{(32-QPN_WIDTH){1'b0}}, s_rsp_qpn} >= NUM_QP ||
                        (s_rsp_opcode != 8'h11 && s_rsp_opcode != 8'h12) ||
                        head[s_rsp_qpn[QP_AW-1:0]] == tail[s_rsp_qpn[QP_AW-1:0]]) begin
                        cnt_unexpected <= cnt_unexpected + 32'd1;
                    end else begin
                        fs <= F_RSP;
                    end
                end else if (take_tmo) begin
                    q <= sc_q;
                    qpn <= {{(QPN_WIDTH-QP_AW){1'b0}}, sc_q};
                    armed[sc_q] <= 1'b0;
                    fs <= F_TMO;
                end
            end

            F_RSP: begin
                moved <= 1'b0;
                rd_q <= q;
                rd_i <= h;
                if (e_rdrsp || e_atack) begin   // the SENDs and WRITEs before it are acked
                    g_psn <= e_psn - 24'd1;
                    ct_mode <= 2'd3;
                    fs <= F_CT_RD;
                end else case (e_syn[7:5])
                    3'd0: begin                    // ACK
                        cnt_acks <= cnt_acks + 32'd1;
                        g_psn <= e_psn;
                        ct_mode <= 2'd0;
                        fs <= F_CT_RD;
                    end
                    3'd1: begin                    // RNR NAK
                        cnt_naks <= cnt_naks + 32'd1;
                        g_psn <= e_psn - 24'd1;
                        ct_mode <= 2'd2;
                        fs <= F_CT_RD;
                    end
                    3'd3: begin                    // NAK
                        cnt_naks <= cnt_naks + 32'd1;
                        if (e_syn[4:0] == 5'd0) begin
                            g_psn <= e_psn - 24'd1;
                            ct_mode <= 2'd1;
                            fs <= F_CT_RD;
                        end else begin
                            g_psn <= e_psn;
                            f_vendor <= VE_REMOTE_NAK;
                            f_status <= e_syn[4:0] == 5'd1 ? CS_REM_INV_REQ_ERR :
                                        e_syn[4:0] == 5'd2 ? CS_REM_ACCESS_ERR :
                                        e_syn[4:0] == 5'd4 ? CS_REM_INV_RD_REQ_ERR :
                                        CS_REM_OP_ERR;
                            fs <= F_FAIL_RD;
                        end
                    end
                    default: begin
                        cnt_unexpected <= cnt_unexpected + 32'd1;
                        fs <= F_IDLE;
                    end
                endcase
            end

            // ---- complete through g_psn
            F_CT_RD: fs <= F_CT;      // rec_q <= record at h

            F_CT: begin
                if (!moved && any_out && psn_ge(g_psn, r_first) && ct_mode != 2'd3 &&
                    (!acked_v[q] || psn_gt(g_psn, acked[q]))) begin
                    acked_v[q] <= 1'b1;
                    acked[q] <= g_psn;
                    moved <= 1'b1;
                end
                if (any_out && psn_ge(g_psn, r_last) && r_rdat) begin
                    // a READ (atomic) is answered by its response, not by ACKs of later
                    // PSNs: an ACK past it means a response was lost, ask again from it
                    if (ct_mode == 2'd0 && !rw_pend[q] && !rr_gap[q]) begin
                        rr_gap[q] <= 1'b1;
                        imp <= 1'b1;
                        g_psn <= r_first + rr_k[q];
                    end
                    fs <= ct_mode == 2'd3 ? F_RR : F_AFTER;
                end else if (any_out && psn_ge(g_psn, r_last)) begin
                    head[q] <= h + 16'd1;
                    rd_i <= h + 16'd1;
                    moved <= 1'b1;
                    if (r_sig) begin
                        cqe_rec(CS_SUCCESS, 8'd0);
                        m_cqe_valid <= 1'b1;
                        c_next <= F_CT_RD;
                        fs <= F_CQE;
                    end else begin
                        fs <= F_CT_RD;
                    end
                end else begin
                    fs <= ct_mode == 2'd3 ? F_RR : F_AFTER;
                end
            end

            // ---- a READ response, for the READ at the head (IBA 9.7.6.1.3; the model's
            //      Completer._read_response)
            F_RR: begin
                if (!pl_valid) begin
                    pl_qpn <= qpn;
                    pl_drop <= 1'b1;
                    pl_off <= rr_done[q];
                    pl_len <= e_plen;
                    pl_atomic <= 1'b0;
                    pl_data <= e_orig;
                    rd_i <= h;
                    c_next <= F_IDLE;
                    fs <= e_plen != 16'd0 ? F_PLD : F_IDLE;
                    if (e_atack) begin
                        // the model's Completer._atomic_ack: for the atomic at the head, its
                        // original value (little-endian, as the model's) into its 8-byte SGEs;
                        // another (a duplicate answered again) is dropped (no payload)
                        if (any_out && r_atomic && e_psn == r_first) begin
                            pl_drop <= 1'b0;
                            pl_atomic <= 1'b1;
                            pl_off <= 32'd0;
                            pl_len <= 16'd8;
                            c_next <= F_RRW;
                            fs <= F_PLD;
                        end else begin
                            cnt_unexpected <= cnt_unexpected + 32'd1;
                        end
                    end else if (!any_out || r_op != OP_READ || psn_gt(r_first + rr_k[q], e_psn) ||
                        psn_gt(e_psn, r_last)) begin
                        cnt_unexpected <= cnt_unexpected + 32'd1;   // answered already
                    end else if (e_psn != r_first + rr_k[q]) begin
                        // a response went missing: ask again from it, once per gap
                        if (!rr_gap[q] && !rw_pend[q]) begin
                            rr_gap[q] <= 1'b1;
                            g_psn <= r_first + rr_k[q];
                            c_next <= F_RETRY;
                            fs <= e_plen != 16'd0 ? F_PLD : F_RETRY;
                        end
                    end else if ({16'd0, e_plen} != (e_psn == r_last ? r_len - rr_done[q] :
                                                     (32'd1 << mtu_l[q])) ||
                                 e_rdlast != (e_psn == r_last) ||
                                 e_pad != 2'd0 - e_plen[1:0]) begin
                        // every packet but the last carries one MTU: else a bad response,
                        // which ends the READ (IBA 9.9.3.2)
                        f_status <= CS_BAD_RESP_ERR;
                        f_vendor <= VE_REMOTE_NAK;
                        g_psn <= e_psn;
                        c_next <= F_FAIL_RD;
                        fs <= e_plen != 16'd0 ? F_PLD : F_FAIL_RD;
                    end else begin
                        rr_gap[q] <= 1'b0;
                        pl_drop <= 1'b0;
                        c_next <= F_RRW;
                        fs <= e_plen != 16'd0 ? F_PLD : F_RRD;
                    end
                end
            end

            F_PLD: begin
                pl_valid <= 1'b1;
                fs <= c_next;
            end

            F_RRW: begin                // placed: else the READ fails (its buffer is gone)
                if (plr_valid) begin
                    if (plr_ok) begin
                        fs <= F_RRD;
                    end else begin
                        f_status <= CS_LOC_PROT_ERR;
                        f_vendor <= VE_BAD_LKEY;
                        g_psn <= e_psn;
                        fs <= F_FAIL_RD;
                    end
                end
            end

            F_RRD: begin
                rr_done[q] <= rr_done[q] + {16'd0, e_plen};
                rr_k[q] <= rr_k[q] + 24'd1;
                acked_v[q] <= 1'b1;
                acked[q] <= e_psn;
                moved <= 1'b1;
                ct_mode <= 2'd0;
                if (e_psn == r_last) begin          // the last: the READ completes
                    head[q] <= h + 16'd1;
                    rd_i <= h + 16'd1;
                    rd_out[q] <= 1'b0;
                    rr_k[q] <= 24'd0;
                    rr_done[q] <= 32'd0;
                    if (r_sig) begin
                        cqe_rec(CS_SUCCESS, 8'd0);
                        m_cqe_valid <= 1'b1;
                        c_next <= F_AFTER;
                        fs <= F_CQE;
                    end else begin
                        fs <= F_AFTER;
                    end
                end else begin
                    fs <= F_AFTER;
                end
            end

            F_CQE: begin
                if (!m_cqe_valid || m_cqe_ready)
                    fs <= c_next;
            end

            F_AFTER: begin
                if (moved) begin
                    retry_left[q] <= retry_cnt[q];
                    rnr_left[q] <= rnr_retry[q];
                    if (any_out && tmo[q] != 5'd0) begin
                        armed[q] <= 1'b1;
                        rnr_wait[q] <= 1'b0;
                        deadline[q] <= now + tmo_cycles;
                    end else begin
                        armed[q] <= 1'b0;
                    end
                end
                if (!imp)
                    g_psn <= e_psn;
                rd_i <= h;
                if (ct_mode == 2'd1) begin            // NAK sequence error: go back to e_psn
                    if (rw_pend[q] && psn_ge(e_psn, rw_pend_psn[q]))
                        fs <= F_IDLE;                   // already going back there: redundant
                    else
                        fs <= F_RETRY;
                end else if (ct_mode == 2'd2) begin   // RNR
                    if (!any_out) begin
                        fs <= F_IDLE;
                    end else if (rnr_retry[q] != 3'd7 && rnr_left[q] == 3'd0 && !moved) begin
                        f_status <= CS_RNR_RETRY_EXC_ERR;
                        f_vendor <= VE_RNR_EXCEEDED;
                        fs <= F_FAIL_RD;
                    end else begin
                        if (rnr_retry[q] != 3'd7)
                            rnr_left[q] <= (moved ? rnr_retry[q] : rnr_left[q]) - 3'd1;
                        armed[q] <= 1'b1;
                        rnr_wait[q] <= 1'b1;
                        rnr_psn[q] <= e_psn;
                        deadline[q] <= now + rnr_cycles;
                        fs <= F_IDLE;
                    end
                end else begin
                    fs <= imp ? F_RETRY : F_IDLE;     // (an implicit NAK: to the READ)
                end
            end

            // ---- a timer expired
            F_TMO: begin
                if (!any_out) begin
                    fs <= F_IDLE;
                end else if (rnr_wait[q]) begin
                    g_psn <= rnr_psn[q];
                    rd_q <= q;
                    rd_i <= h;
                    fs <= F_RW_RD;
                end else begin
                    cnt_timeouts <= cnt_timeouts + 32'd1;
                    rd_q <= q;
                    rd_i <= h;
                    fs <= F_FU_RD;
                end
            end

            F_FU_RD: fs <= F_FU;

            F_FU: begin                 // the first unacknowledged PSN
                if (r_rdat)             // (a READ, atomic: its first response not received)
                    g_psn <= r_first + rr_k[q];
                else if (acked_v[q] && psn_ge(acked[q], r_first))
                    g_psn <= acked[q] + 24'd1;
                else
                    g_psn <= r_first;
                fs <= F_RETRY;
            end

            F_RETRY: begin
                rd_i <= h;
                if (!any_out) begin
                    fs <= F_IDLE;
                end else if (retry_left[q] == 3'd0) begin
                    f_status <= CS_RETRY_EXC_ERR;
                    f_vendor <= VE_RETRY_EXCEEDED;
                    fs <= F_FAIL_RD;
                end else begin
                    retry_left[q] <= retry_left[q] - 3'd1;
                    fs <= F_RW_RD;
                end
            end

            // ---- go back to g_psn: the WQE holding it
            F_RW_RD: fs <= F_RW;

            F_RW: begin
                if (rd_i == t) begin                  // past the tail: nothing to resend
                    fs <= F_IDLE;
                end else if (psn_ge(r_last, g_psn)) begin
                    cnt_resends <= cnt_resends + 32'd1;
                    rw_qpn <= qpn;
                    rw_index <= rd_i;
                    rw_first_psn <= r_first;
                    rw_psn <= psn_ge(g_psn, r_first) ? g_psn : r_first;
                    rw_pend[q] <= 1'b1;
                    rw_pend_psn[q] <= g_psn;
                    if (tmo[q] != 5'd0) begin
                        armed[q] <= 1'b1;
                        rnr_wait[q] <= 1'b0;
                        deadline[q] <= now + tmo_cycles;
                    end
                    fs <= F_RW_OUT;
                end else begin
                    rd_i <= rd_i + 16'd1;
                    fs <= F_RW_RD;
                end
            end

            F_RW_OUT: begin
                if (!rw_valid) begin
                    rw_valid <= 1'b1;
                    fs <= F_IDLE;
                end
            end

            // ---- fail at g_psn: WQEs before it complete, the one at it fails, QP to ERR
            F_FAIL_RD: fs <= F_FAIL;

            F_FAIL: begin
                if (any_out && psn_gt(g_psn, r_last)) begin   // before the failed PSN
                    head[q] <= h + 16'd1;
                    rd_i <= h + 16'd1;
                    if (r_sig) begin
                        cqe_rec(CS_SUCCESS, 8'd0);
                        m_cqe_valid <= 1'b1;
                        c_next <= F_FAIL_RD;
                        fs <= F_CQE;
                    end else begin
                        fs <= F_FAIL_RD;
                    end
                end else if (any_out) begin                    // the failed WQE
                    head[q] <= h + 16'd1;
                    rd_i <= h + 16'd1;
                    cqe_rec(f_status, f_vendor);
                    m_cqe_valid <= 1'b1;
                    c_next <= F_FLUSH_RD;
                    fs <= F_CQE;
                end else begin
                    fs <= F_FLUSH_RD;
                end
            end

            // ---- the QP fails: flush what is outstanding
            F_FLUSH_RD: fs <= F_FLUSH;

            F_FLUSH: begin
                if (any_out) begin
                    head[q] <= h + 16'd1;
                    rd_i <= h + 16'd1;
                    m_cqe_cqn <= scq[q];
                    m_cqe_qpn <= {{(32-QPN_WIDTH){1'b0}}, qpn};
                    m_cqe_wqe_index <= h;
                    m_cqe_opcode <= 8'd0;
                    m_cqe_status <= CS_WR_FLUSH_ERR;
                    m_cqe_byte_len <= 32'd0;
                    m_cqe_vendor_err <= VE_FLUSHED;
                    m_cqe_valid <= 1'b1;
                    c_next <= F_FLUSH_RD;
                    fs <= F_CQE;
                end else begin
                    armed[q] <= 1'b0;
                    rw_pend[q] <= 1'b0;
                    rr_k[q] <= 24'd0;
                    rr_done[q] <= 32'd0;
                    rr_gap[q] <= 1'b0;
                    fs <= lc_pend ? F_LOCAL : F_ERR;
                end
            end

            F_LOCAL: begin              // the requester's own completion (after any flush)
                m_cqe_cqn <= lc_cqn_r;
                m_cqe_qpn <= {{(32-QPN_WIDTH){1'b0}}, qpn};
                m_cqe_wqe_index <= lc_index_r;
                m_cqe_opcode <= lc_opcode_r;
                m_cqe_status <= lc_status_r;
                m_cqe_byte_len <= 32'd0;
                m_cqe_vendor_err <= lc_vendor_r;
                m_cqe_valid <= 1'b1;
                lc_pend <= 1'b0;
                c_next <= f_head ? F_IDLE : F_ERR;   // a local error fails the QP
                f_head <= 1'b1;
                fs <= F_CQE;
            end

            default: begin              // F_ERR: the QP table says ERR
                if (!qp_err_valid) begin
                    qp_err_valid <= 1'b1;
                    qp_err_qpn <= qpn;
                    fs <= F_IDLE;
                end
            end
        endcase

        // a go-back taken by the requester
        if (rw_valid && rw_ready)
            rw_pend[rw_qpn[QP_AW-1:0]] <= 1'b0;

        // a QP configured: forget everything about it
        if (cfg_valid) begin
            head[cfg_qpn[QP_AW-1:0]] <= 16'd0;
            tail[cfg_qpn[QP_AW-1:0]] <= 16'd0;
            acked_v[cfg_qpn[QP_AW-1:0]] <= 1'b0;
            known[cfg_qpn[QP_AW-1:0]] <= 1'b0;
            armed[cfg_qpn[QP_AW-1:0]] <= 1'b0;
            rw_pend[cfg_qpn[QP_AW-1:0]] <= 1'b0;
            rd_out[cfg_qpn[QP_AW-1:0]] <= 1'b0;
            rr_k[cfg_qpn[QP_AW-1:0]] <= 24'd0;
            rr_done[cfg_qpn[QP_AW-1:0]] <= 32'd0;
            rr_gap[cfg_qpn[QP_AW-1:0]] <= 1'b0;
        end

        if (rst) begin
            fs <= F_IDLE;
            now <= 48'd0;
            sc_q <= {QP_AW{1'b0}};
            m_cqe_valid <= 1'b0;
            rw_valid <= 1'b0;
            pl_valid <= 1'b0;
            rd_out <= {NUM_QP{1'b0}};
            rr_gap <= {NUM_QP{1'b0}};
            qp_err_valid <= 1'b0;
            lc_pend <= 1'b0;
            f_head <= 1'b1;
            acked_v <= {NUM_QP{1'b0}};
            known <= {NUM_QP{1'b0}};
            armed <= {NUM_QP{1'b0}};
            rnr_wait <= {NUM_QP{1'b0}};
            rw_pend <= {NUM_QP{1'b0}};
            cnt_acks <= 32'd0;
            cnt_naks <= 32'd0;
            cnt_timeouts <= 32'd0;
            cnt_resends <= 32'd0;
            cnt_cqes <= 32'd0;
            cnt_unexpected <= 32'd0;
            for (k = 0; k < NUM_QP; k = k + 1) begin
                head[k] <= 16'd0;
                tail[k] <= 16'd0;
                rr_k[k] <= 24'd0;
                rr_done[k] <= 32'd0;
            end
        end
    end

    // (QPNs index the tables by their low bits: numbers >= NUM_QP never reach here)
    wire unused_qpn = &{1'b0, st_qpn, cfg_qpn};

endmodule
`default_nettype wire
