`default_nettype none
`include "nic_common.vh"
// roce_resp: the responder of the nsnic RoCEv2 NIC for RDMA WRITE, SEND, READ and atomics (IBA
// 9.7.4-9.7.5; it also places the payload of READ responses for the completer, below),
// as nicsim/nic/responder.py handles them: requests from the peer are checked and placed in
// host memory, and answered with coalesced ACKs or NAKs.
//
// Per request packet, in the model's order:
//   - the QP must be in RTR, RTS or SQD (else dropped);
//   - PSN: ahead of the expected PSN: a PSN-sequence NAK for the expected PSN, once until it
//     arrives; behind it (a duplicate): an ACK of the expected PSN - 1 if the packet asks for
//     one, nothing is executed again;
//   - opcode sequence (FIRST or ONLY start a message, MIDDLE and LAST continue one of the same
//     kind; C9-29) and length (FIRST and MIDDLE carry one MTU without pad, LAST and ONLY at
//     most one MTU, LAST at least one byte; C9-92): else NAK invalid request;
//   - WRITE: the QP's REMOTE_WRITE right, and on the first packet the RETH (DMA length at most
//     2^31, consistent with the packet) and the rkey (mr_translate: key, PD, REMOTE_WRITE,
//     bounds of the whole DMA length): else NAK remote access error (length errors: invalid
//     request); later packets must stay within the announced length and the last must end it;
//     the last packet of a WRITE with immediate needs a receive WQE: RNR NAK (min_rnr_timer)
//     if the RQ is empty;
//   - SEND: the first packet needs a receive WQE (RNR NAK if none), read from the RQ ring
//     (hwif RecvWqeCtrl + Sge, at most MAX_RSGE SGEs); every SGE with bytes is checked (lkey,
//     PD, LOCAL_WRITE, bounds): else NAK remote operational error and the WQE completes
//     LOC_PROT_ERR; the message must fit the buffers: else NAK invalid request and the WQE
//     completes LOC_LEN_ERR with the bytes placed so far; the last WQE read is kept, so the
//     later packets of a message do not read it again;
//   - the payload is translated (rkey and current address; or, for SEND, the SGE pieces the
//     packet's bytes fall into) and written (AXI4, one burst per page piece, the bytes
//     realigned to the target address); the ACK and completion of a packet wait until its
//     writes are answered (B);
//   - the last packet completes the message: the MSN advances; WRITE with immediate consumes
//     a receive WQE (no scatter) with a RECV_RDMA_WITH_IMM completion (WITH_IMM flag, the
//     message length); SEND completes its WQE as RECV (the bytes received; WITH_IMM and the
//     immediate, or WITH_INV and the IETH's rkey; there are no memory windows here, so
//     nothing is invalidated: the model invalidates the bound type 2 window the key names or
//     NAKs invalid request, so the two differ for SEND with invalidate);
//   - an ACK (AETH credit count from the free receive WQEs) on AckReq, or after ACK_EVERY
//     packets.
// A NAK of invalid request, remote access or remote operational error fails the QP (IBA
// 9.9.3.1): a receive WQE being filled completes with the error (invalid request mid-SEND:
// REM_INV_REQ_ERR), the completer flushes the send queue and sets ERR (fail_*), the other
// posted receive WQEs complete WR_FLUSH_ERR, and RQ doorbells of a failed QP are flushed as
// they come. A translation that fails between packets of a message (the MR deregistered)
// drops the rest of the packet and NAKs (WRITE: remote access; SEND: remote operational,
// LOC_PROT_ERR); bytes of that packet already written stay (the model checks before it
// places any).
//   - READ (IBA 9.7.4.1.4): the QP's REMOTE_READ right (else NAK remote access), the RETH's
//     DMA length at most 2^31 (else NAK invalid request), the rkey (key, PD, REMOTE_READ,
//     bounds of the whole length; a zero-length READ checks nothing, C9-88: else NAK remote
//     access); then the READ takes max(1, ceil(length / MTU)) PSNs, the MSN counts it at once
//     (C9-148) and the response packets are sent: READ RESPONSE FIRST / MIDDLE / LAST or ONLY
//     (AETH ACK with unlimited credits and the MSN on all but MIDDLE), one per MTU, PSNs from
//     the request's; each packet's bytes are translated again (a failure NAKs remote access
//     at that packet's PSN, as the model's per-packet key check) and read from host memory by
//     dma_rd_stream into m_rd_* (the payload of the READ RESPONSE descriptors on ack_*);
//   - a duplicate READ (behind the expected PSN, IBA 9.7.5.1.1) that asks for the rest of one
//     of the QP's RD_RES newest READs from its PSN on (same rkey, the address of that packet,
//     the same end) is executed again from that PSN, with the current MSN; other duplicate
//     READs are dropped (class D, 9.9.3). READs are executed one at a time in order (the next
//     request waits until the previous READ's descriptors and reads are all issued), so none
//     is ever refused for max_dest_rd_atomic; the RD_RES newest are remembered for replays
//     (the model remembers max(1, max_dest_rd_atomic) of them).
//   - CMP_SWAP and FETCH_ADD (IBA 9.4.5, 9.7.4.1.5): the AtomicETH's address must be 8-byte
//     aligned (else NAK invalid request, as the model and rxe), the QP must grant
//     REMOTE_ATOMIC and the rkey the 8 bytes (mr_translate: key, PD, REMOTE_ATOMIC, bounds;
//     else NAK remote access); the 8 bytes are read (one AXI4 beat, after every earlier write
//     of the responder is answered and the READ response reads are issued), the new value
//     (the sum, or the swap value if the compare value matched) written back as one beat, and
//     only when that write is answered (B) goes the ATOMIC ACKNOWLEDGE (AETH ACK with
//     unlimited credits and the MSN, AtomicAckETH with the original value): nothing else of
//     this responder touches host memory between the read and the write, and a later request
//     (a READ of the same bytes) is executed after the write is done. The atomic takes one
//     PSN and counts in the MSN;
//   - a duplicate atomic (IBA 9.7.5.1.1, o9-28: its ACKNOWLEDGE was lost) whose PSN is one of
//     the QP's RD_RES newest READs and atomics is not executed again: it is answered with the
//     original value remembered with it, and the current MSN; an atomic no longer remembered
//     (RD_RES newer READs and atomics since) is dropped (class D), as the model drops one
//     older than its max_dest_rd_atomic newest.
// Requests from another address than the QP's path, or with another P_Key, are dropped.
//
// Per-QP state (expected PSN, MSN, message in progress, RQ indexes) is in flip-flops; the
// remembered READs and atomics in a RAM.
//
// Parameters:
//   DATA_WIDTH, ADDR_WIDTH, NUM_QP, QPN_WIDTH, CQN_WIDTH, TAG_WIDTH, ECN_CAPABLE  (as roce_req)
//   ACK_EVERY   an ACK at least every this many packets (NicConfig.ack_coalesce)
//   MAX_RSGE    SGEs of a receive WQE used (the device's max_sge)
//   RD_RES      READs and atomics remembered per QP for duplicates (a power of two, <= 8)
//   RD_DEPTH    READ response payload FIFO, in beats (power of two, >= one burst)
//
// Ports:
//   s_req_*     request packets (metadata from roce_rx: the AtomicETH's fields in
//               s_req_atomic_*) and s_pay_* their payload, in order
//   ctx_*       QP table read port (data one cycle after the address)
//   rq_psn_set_valid, rq_psn_set_qpn   a command set the QP's rq_psn: reload the expected PSN
//   rq_db_*     RQ doorbells (producer index)
//   cfg_valid, cfg_qpn   the QP was configured (create, RESET, RTS, destroy): forget its state
//   mr_req_*, mr_rsp_*   mr_translate lookups
//   m_axi_ar*, m_axi_r*   AXI4 read master (receive WQEs, READ response payload)
//   m_axi_aw*, m_axi_w*, m_axi_b*   AXI4 write master (payload)
//   ack_*       response descriptors for the framer: ACK / NAK (opcode ACKNOWLEDGE, no
//               payload), ATOMIC ACKNOWLEDGE (ack_orig: the original value) and READ
//               RESPONSE packets (payload on m_rd_*, in descriptor order)
//   m_rd_*      READ response payload (packed, tlast at the end of each packet)
//   m_cqe_*     receive completions
//   fail_*      a QP fails (to the completer: flush the send queue, ERR)
//   rd_sge_*    the requester started a READ: its SGEs and PD (kept per QP: one READ
//               outstanding per QP)
//   pl_*, plr_* the completer's verdict on a READ RESPONSE payload (next on s_pay_*): drop
//               it, or place pl_len bytes at offset pl_off of the QP's READ SGEs (each piece
//               translated with LOCAL_WRITE, written by the same burst engine as a SEND's
//               scatter); plr_* says when it is written (B responses in) or that a
//               translation failed (the rest of the payload dropped); pl_atomic: the 8
//               bytes are pl_data (an ATOMIC ACKNOWLEDGE's original value, little-endian),
//               not from s_pay_*, into the atomic's SGEs (kept as a READ's)
//   cnt_*       request packets, bytes placed, ACKs, NAKs, duplicates, dropped (QP not
//               receiving, or not from its path), atomics (at the expected PSN: executed or
//               refused; not their duplicates)
module roce_resp #(
    parameter DATA_WIDTH = 64,
    parameter ADDR_WIDTH = 64,
    parameter NUM_QP = 64,
    parameter QPN_WIDTH = 24,
    parameter CQN_WIDTH = 24,
    parameter TAG_WIDTH = 8,
    parameter ECN_CAPABLE = 1,
    parameter ACK_EVERY = 16,
    parameter MAX_RSGE = 4,
    parameter RD_RES = 4,
    parameter RD_DEPTH = 512
) (
    input  wire                          clk,
    input  wire                          rst,

    input  wire                          s_req_valid,
    output wire                          s_req_ready,
    input  wire [QPN_WIDTH-1:0]          s_req_qpn,
    input  wire [7:0]                    s_req_opcode,
    input  wire [23:0]                   s_req_psn,
    input  wire                          s_req_ackreq,
    input  wire [1:0]                    s_req_padcount,
    input  wire [15:0]                   s_req_payload_len,
    input  wire [63:0]                   s_req_reth_va,
    input  wire [31:0]                   s_req_reth_rkey,
    input  wire [31:0]                   s_req_reth_len,
    input  wire [31:0]                   s_req_imm,
    input  wire [31:0]                   s_req_ieth,
    input  wire                          s_req_ipv6,
    input  wire [127:0]                  s_req_sip,
    input  wire [127:0]                  s_req_dip,
    input  wire [15:0]                   s_req_pkey,
    input  wire [63:0]                   s_req_atomic_va,
    input  wire [31:0]                   s_req_atomic_rkey,
    input  wire [63:0]                   s_req_atomic_swap_add,
    input  wire [63:0]                   s_req_atomic_compare,

    input  wire [DATA_WIDTH-1:0]         s_pay_tdata,
    input  wire [DATA_WIDTH/8-1:0]       s_pay_tkeep,
    input  wire                          s_pay_tvalid,
    output wire                          s_pay_tready,
    input  wire                          s_pay_tlast,

    output wire [QPN_WIDTH-1:0]          ctx_qpn,
    output wire [3:0]                    ctx_word,
    input  wire [63:0]                   ctx_data,
    input  wire                          rq_psn_set_valid,
    input  wire [QPN_WIDTH-1:0]          rq_psn_set_qpn,
    input  wire                          rq_db_valid,
    input  wire [QPN_WIDTH-1:0]          rq_db_qpn,
    input  wire [15:0]                   rq_db_pi,
    input  wire                          cfg_valid,
    input  wire [QPN_WIDTH-1:0]          cfg_qpn,

    output reg                           mr_req_valid,
    input  wire                          mr_req_ready,
    output reg  [31:0]                   mr_req_key,
    output reg  [31:0]                   mr_req_pd,
    output wire [7:0]                    mr_req_access,
    output reg  [63:0]                   mr_req_va,
    output reg  [31:0]                   mr_req_len,
    output wire [TAG_WIDTH-1:0]          mr_req_tag,
    input  wire                          mr_rsp_valid,
    output wire                          mr_rsp_ready,
    input  wire [2:0]                    mr_rsp_status,
    input  wire [ADDR_WIDTH-1:0]         mr_rsp_pa,
    input  wire [12:0]                   mr_rsp_len,
    input  wire                          mr_rsp_last,

    `NIC_AXI_RD_MASTER_NOID_PORTS(ADDR_WIDTH, DATA_WIDTH),

    output wire [ADDR_WIDTH-1:0]         m_axi_awaddr,
    output wire [7:0]                    m_axi_awlen,
    output wire [2:0]                    m_axi_awsize,
    output wire [1:0]                    m_axi_awburst,
    output wire                          m_axi_awvalid,
    input  wire                          m_axi_awready,
    output wire [DATA_WIDTH-1:0]         m_axi_wdata,
    output wire [DATA_WIDTH/8-1:0]       m_axi_wstrb,
    output wire                          m_axi_wlast,
    output wire                          m_axi_wvalid,
    input  wire                          m_axi_wready,
    input  wire [1:0]                    m_axi_bresp,
    input  wire                          m_axi_bvalid,
    output wire                          m_axi_bready,

    output reg                           ack_valid,
    input  wire                          ack_ready,
    output wire [47:0]                   ack_dmac,
    output wire [47:0]                   ack_smac,
    output wire                          ack_ipv6,
    output wire [127:0]                  ack_sip,
    output wire [127:0]                  ack_dip,
    output wire [7:0]                    ack_tos,
    output wire [7:0]                    ack_ttl,
    output wire [15:0]                   ack_udp_sport,
    output wire [23:0]                   ack_dqpn,
    output reg  [23:0]                   ack_psn,
    output reg  [7:0]                    ack_syndrome,
    output reg  [23:0]                   ack_msn,
    output reg  [7:0]                    ack_opcode,
    output reg  [15:0]                   ack_payload_len,
    output reg  [63:0]                   ack_orig,

    output wire [DATA_WIDTH-1:0]         m_rd_tdata,
    output wire [DATA_WIDTH/8-1:0]       m_rd_tkeep,
    output wire                          m_rd_tvalid,
    input  wire                          m_rd_tready,
    output wire                          m_rd_tlast,
    output wire                          m_rd_tuser,

    output reg                           m_cqe_valid,
    input  wire                          m_cqe_ready,
    output reg  [CQN_WIDTH-1:0]          m_cqe_cqn,
    output reg  [31:0]                   m_cqe_qpn,
    output reg  [15:0]                   m_cqe_wqe_index,
    output reg  [7:0]                    m_cqe_opcode,
    output reg  [7:0]                    m_cqe_status,
    output reg  [31:0]                   m_cqe_byte_len,
    output reg  [31:0]                   m_cqe_imm,
    output reg  [7:0]                    m_cqe_flags,
    output reg  [7:0]                    m_cqe_vendor_err,

    output reg                           fail_valid,
    input  wire                          fail_ready,
    output reg  [QPN_WIDTH-1:0]          fail_qpn,

    input  wire                          rd_sge_valid,
    input  wire [QPN_WIDTH-1:0]          rd_sge_qpn,
    input  wire [31:0]                   rd_sge_pd,
    input  wire [MAX_RSGE*64-1:0]        rd_sge_addr,
    input  wire [MAX_RSGE*32-1:0]        rd_sge_len,
    input  wire [MAX_RSGE*32-1:0]        rd_sge_lkey,
    input  wire                          pl_valid,
    output wire                          pl_ready,
    input  wire [QPN_WIDTH-1:0]          pl_qpn,
    input  wire                          pl_drop,
    input  wire [31:0]                   pl_off,
    input  wire [15:0]                   pl_len,
    input  wire                          pl_atomic,
    input  wire [63:0]                   pl_data,
    output reg                           plr_valid,
    output reg                           plr_ok,

    output reg  [31:0]                   cnt_requests,
    output reg  [31:0]                   cnt_bytes,
    output reg  [31:0]                   cnt_acks,
    output reg  [31:0]                   cnt_naks,
    output reg  [31:0]                   cnt_duplicates,
    output reg  [31:0]                   cnt_dropped,
    output reg  [31:0]                   cnt_atomics
);

    `NIC_CLOG2_FUNCTION

    localparam KW = DATA_WIDTH / 8;
    localparam KW_LOG = clog2(KW);
    localparam QP_AW = NUM_QP > 1 ? clog2(NUM_QP) : 1;
    localparam integer BURST_I = 256 * KW < 4096 ? 256 * KW : 4096;
    localparam BURST_LOG = clog2(BURST_I);

    localparam [7:0] QPS_RTR = 8'd2;
    localparam [7:0] QPS_RTS = 8'd3;
    localparam [7:0] QPS_SQD = 8'd4;
    localparam [7:0] SYN_NAK_SEQ = 8'h60;
    localparam [7:0] SYN_NAK_INV_REQ = 8'h61;
    localparam [7:0] SYN_NAK_REM_ACCESS = 8'h62;
    localparam [7:0] SYN_NAK_REM_OP = 8'h63;
    localparam [7:0] SYN_ACK_UNLIMITED = 8'h1f;     // ACK, credit code 31 (READ responses)
    localparam [7:0] OP_ACK = 8'h11;
    localparam [7:0] OP_ATOMIC_ACK = 8'h12;
    localparam RD_LOG = RD_RES > 1 ? clog2(RD_RES) : 1;
    // An SGE's index (sg_addr/sg_len/sg_key): exactly wide enough for MAX_RSGE entries, and
    // never stepped past the last one (see ck_end and the scatter), so no index is out of range.
    localparam SG_IW = MAX_RSGE > 1 ? clog2(MAX_RSGE) : 1;
    localparam integer SG_LAST_I = MAX_RSGE - 1;
    localparam [SG_IW-1:0] SG_LAST = SG_LAST_I[SG_IW-1:0];
    localparam integer KW_M1 = KW - 1;

    // AETH credit code (IBA table 44) for `free` receive WQEs: the largest code whose count
    // does not exceed it
    function [4:0] credit_code;
        input [15:0] free;
        begin
            if (free >= 16'd32768) credit_code = 5'd30;
            else if (free >= 16'd24576) credit_code = 5'd29;
            else if (free >= 16'd16384) credit_code = 5'd28;
            else if (free >= 16'd12288) credit_code = 5'd27;
            else if (free >= 16'd8192) credit_code = 5'd26;
            else if (free >= 16'd6144) credit_code = 5'd25;
            else if (free >= 16'd4096) credit_code = 5'd24;
            else if (free >= 16'd3072) credit_code = 5'd23;
            else if (free >= 16'd2048) credit_code = 5'd22;
            else if (free >= 16'd1536) credit_code = 5'd21;
            else if (free >= 16'd1024) credit_code = 5'd20;
            else if (free >= 16'd768) credit_code = 5'd19;
            else if (free >= 16'd512) credit_code = 5'd18;
            else if (free >= 16'd384) credit_code = 5'd17;
            else if (free >= 16'd256) credit_code = 5'd16;
            else if (free >= 16'd192) credit_code = 5'd15;
            else if (free >= 16'd128) credit_code = 5'd14;
            else if (free >= 16'd96) credit_code = 5'd13;
            else if (free >= 16'd64) credit_code = 5'd12;
            else if (free >= 16'd48) credit_code = 5'd11;
            else if (free >= 16'd32) credit_code = 5'd10;
            else if (free >= 16'd24) credit_code = 5'd9;
            else if (free >= 16'd16) credit_code = 5'd8;
            else if (free >= 16'd12) credit_code = 5'd7;
            else if (free >= 16'd8) credit_code = 5'd6;
            else if (free >= 16'd6) credit_code = 5'd5;
            else credit_code = free[4:0] > 5'd4 ? 5'd4 : free[4:0];
        end
    endfunction

    // ---------------------------------------------------------------- per-QP state
    reg [23:0]       epsn [0:NUM_QP-1];
    reg [23:0]       msn [0:NUM_QP-1];
    reg [NUM_QP-1:0] in_write;      // a WRITE in progress
    reg [NUM_QP-1:0] in_send;       // a SEND in progress (its receive WQE at rq_ci)
    reg [NUM_QP-1:0] nak_sent;
    reg [NUM_QP-1:0] epsn_stale;    // rq_psn set by a command: reload from the table
    reg [NUM_QP-1:0] rfail;         // the QP failed here: flush its RQ doorbells
    reg [4:0]        unacked [0:NUM_QP-1];
    reg [15:0]       rq_pi [0:NUM_QP-1];
    reg [15:0]       rq_ci [0:NUM_QP-1];
    reg [63:0]       m_va [0:NUM_QP-1];     // the WRITE in progress: next address, rkey,
    reg [31:0]       m_rkey [0:NUM_QP-1];   // bytes placed so far, its DMA length
    reg [31:0]       m_len [0:NUM_QP-1];
    reg [31:0]       m_cap [0:NUM_QP-1];

    // ---------------------------------------------------------------- the packet
    reg [QP_AW-1:0]     q;
    reg [QPN_WIDTH-1:0] p_qpn;
    reg [7:0]           p_op;
    reg [23:0]          p_psn;
    reg                 p_ackreq;
    reg [1:0]           p_pad;
    reg [15:0]          p_len;
    reg [63:0]          p_va;
    reg [31:0]          p_rkey;
    reg [31:0]          p_dlen;
    reg [31:0]          p_imm;
    reg [31:0]          p_ieth;
    reg                 p_ipv6;
    reg [127:0]         p_sip;
    reg [127:0]         p_dip;
    reg [15:0]          p_pkey;
    reg [63:0]          p_swap;     // atomic: swap or add operand, compare operand
    reg [63:0]          p_cmp;
    reg                 rr;         // placing a READ response's payload (not a request's)
    reg [31:0]          rr_off;     // its offset in the READ's buffers

    // context
    reg [7:0]   c_state;
    reg [7:0]   c_pmtu;
    reg [7:0]   c_access;
    reg [31:0]  c_pd;
    reg [31:0]  c_rcqn;
    reg [7:0]   c_rnr;
    reg [31:0]  c_dqpn;
    reg [23:0]  c_rqpsn;
    reg [63:0]  c_rqbase;
    reg [7:0]   c_rqlsize;
    reg [7:0]   c_rqlstride;
    reg [447:0] c_b;
    reg [15:0]  c_sport;

    localparam [4:0] P_IDLE = 5'd0;
    localparam [4:0] P_CTX = 5'd1;
    localparam [4:0] P_EVAL = 5'd2;
    localparam [4:0] P_CHK = 5'd3;      // rkey check of a FIRST: wait for its responses
    localparam [4:0] P_PLACE = 5'd4;    // translate and write the payload
    localparam [4:0] P_WAITB = 5'd5;    // the payload's writes answered
    localparam [4:0] P_DONE = 5'd6;     // message end, CQE, then the ACK
    localparam [4:0] P_ACK = 5'd7;      // send ack_* then go to p_next
    localparam [4:0] P_DRAIN = 5'd8;    // drop the packet's payload
    localparam [4:0] P_FAIL = 5'd9;     // a fatal NAK was sent: fail the QP, flush the RQ
    localparam [4:0] P_FLUSH = 5'd10;
    localparam [4:0] P_CQE = 5'd11;     // wait for m_cqe to be taken, then p_next
    localparam [4:0] P_SCAN = 5'd12;    // flush the RQ of a failed QP (doorbell after ERR)
    localparam [4:0] P_RQW = 5'd13;     // SEND: read the receive WQE (unless cached)
    localparam [4:0] P_RQC = 5'd14;     // SEND: the WQE's SGEs
    localparam [4:0] P_RQK = 5'd15;     // SEND FIRST/ONLY: check every SGE (lkey, PD, bounds)
    localparam [4:0] P_SCAP = 5'd16;    // SEND: the message fits the receive buffers
    localparam [4:0] P_RD0 = 5'd17;     // READ: checked; remember it, start the responses
    localparam [4:0] P_RDT = 5'd18;     // READ: translate the next response's bytes
    localparam [4:0] P_RDS = 5'd19;     // READ: its segments -> read chunks
    localparam [4:0] P_RDH = 5'd20;     // READ: its descriptor (or the NAK)
    localparam [4:0] P_RRL = 5'd21;     // READ RESPONSE placement: the READ's SGEs
    localparam [4:0] P_ATR = 5'd22;     // atomic: read the 8 bytes
    localparam [4:0] P_ATD = 5'd23;     // atomic: their beat in
    localparam [4:0] P_ATX = 5'd24;     // atomic: compute, AW, remember, advance
    localparam [4:0] P_ATW = 5'd25;     // atomic: the W beat once AW is taken
    localparam [4:0] P_ATB = 5'd26;     // atomic: the write answered (B), then the ACK

    reg [4:0]  ps;
    reg [3:0]  ci;
    reg [3:0]  cd;
    wire [3:0] ci_m1 = ci - 4'd1;    // the remembered READ ci reads (ci 1..RD_RES)
    wire [2:0] cd_b = cd[2:0] - 3'd5;    // the c_b word cd holds (cd 5..11: 0..6)
    reg        cd_v;
    reg        drain_after;   // after the ACK/NAK: drain the payload
    reg        ack_due;
    reg        fail_after;    // after the NAK: fail the QP

    function [3:0] ctx_word_of;
        input [3:0] step;
        begin
            case (step)
                4'd0: ctx_word_of = 4'd0;
                4'd1: ctx_word_of = 4'd2;     // recv_cqn (bytes 16..19)
                4'd2: ctx_word_of = 4'd1;     // pd
                4'd3: ctx_word_of = 4'd5;
                4'd4: ctx_word_of = 4'd6;
                4'd12: ctx_word_of = 4'd3;    // rq_base (bytes 28..35)
                4'd13: ctx_word_of = 4'd4;    // rq_base, rq_log_size, rq_log_stride
                default: ctx_word_of = step + 4'd3;   // 5..11 -> 8..14
            endcase
        end
    endfunction
    assign ctx_qpn = p_qpn;
    assign ctx_word = ctx_word_of(ci);

    // the path (as roce_req)
    wire [13:0] sp_low;
    roce_path #(
        .QPN_WIDTH(QPN_WIDTH),
        .ECN_CAPABLE(ECN_CAPABLE)
    ) u_path (
        .path(c_b),
        .qpn(p_qpn),
        .dqpn(c_dqpn[23:0]),
        .dmac(ack_dmac),
        .smac(ack_smac),
        .ipv6(ack_ipv6),
        .sip(ack_sip),
        .dip(ack_dip),
        .tos(ack_tos),
        .ttl(ack_ttl),
        .sport_low(sp_low)
    );
    // A connected QP takes requests only from its path (IBA 9.6 header validation; the IP
    // addresses stand for the GRH's GIDs, Annex A17): the source is the peer, the destination
    // this QP's address, the same IP version, the QP's P_Key; else dropped silently (the model's
    // bad_src_ip / bad_dst_ip / bad_pkey)
    wire [15:0] c_pkey = c_b[8*44 +: 16];
    wire path_ok = p_ipv6 == ack_ipv6 && p_pkey == c_pkey &&
                   (p_ipv6 ? (p_sip == ack_dip && p_dip == ack_sip)
                           : (p_sip[31:0] == ack_dip[31:0] && p_dip[31:0] == ack_sip[31:0]));
    assign ack_udp_sport = c_sport;
    assign ack_dqpn = c_dqpn[23:0];

    // the packet, decoded
    wire [3:0]  mtu_log = (c_pmtu >= 8'd1 && c_pmtu <= 8'd5) ? c_pmtu[3:0] + 4'd7 : 4'd10;
    wire [15:0] mtu = 16'd1 << mtu_log;
    wire is_write = p_op >= 8'h06 && p_op <= 8'h0b;
    wire is_send = p_op <= 8'h05 || p_op == 8'h16 || p_op == 8'h17;
    wire is_first = p_op == 8'h06 || p_op == 8'h0a || p_op == 8'h0b ||
                    p_op == 8'h00 || p_op == 8'h04 || p_op == 8'h05 || p_op == 8'h17;
    wire is_last = p_op == 8'h08 || p_op == 8'h09 || p_op == 8'h0a || p_op == 8'h0b ||
                   (is_send && p_op != 8'h00 && p_op != 8'h01);
    wire has_imm = p_op == 8'h09 || p_op == 8'h0b || p_op == 8'h03 || p_op == 8'h05;
    wire has_inv = p_op == 8'h16 || p_op == 8'h17;
    wire is_read = p_op == 8'h0c;
    wire is_atomic = p_op == 8'h13 || p_op == 8'h14;    // CMP_SWAP, FETCH_ADD
    wire s_atomic = s_req_opcode == 8'h13 || s_req_opcode == 8'h14;
    wire [23:0] ep = epsn_stale[q] ? c_rqpsn : epsn[q];
    wire [23:0] pd_ = p_psn - ep;
    wire [1:0]  pad_of_len = 2'd0 - p_len[1:0];
    wire [1:0]  pad_of_dlen = 2'd0 - p_dlen[1:0];
    // (READ and atomic requests are single-packet messages: they start one)
    wire seq_ok = in_write[q] ? (is_write && !is_first) :
                  in_send[q] ? (is_send && !is_first) : (is_first || is_read || is_atomic);
    wire len_ok = !is_last ? ({16'd0, p_len} == {16'd0, mtu} && p_pad == 2'd0) :
                  (p_len <= mtu && (is_first || p_len != 16'd0));
    wire [31:0] placed = m_len[q];
    wire first_len_bad = p_dlen > 32'h8000_0000 ||
                         (is_last ? ({16'd0, p_len} != p_dlen || p_pad != pad_of_dlen)
                                  : p_dlen <= {16'd0, mtu});
    wire cont_len_bad = placed + {16'd0, p_len} > m_cap[q] ||
                        (is_last && (placed + {16'd0, p_len} != m_cap[q] ||
                                     p_pad != pad_of_len));
    wire rq_empty = rq_pi[q] == rq_ci[q];
    wire [15:0] rq_free = rq_pi[q] - rq_ci[q];

    // ---------------------------------------------------------------- translation
    // LOCAL_WRITE (receive buffers), REMOTE_READ, REMOTE_ATOMIC, REMOTE_WRITE
    assign mr_req_access = (is_send || rr) ? 8'd1 : is_read ? 8'd4 : is_atomic ? 8'd8 : 8'd2;
    assign mr_req_tag = {TAG_WIDTH{1'b0}};
    reg  ck_first;
    reg  ck_bad;
    reg  ck_done;
    reg  ck_wait;                   // SEND: a check of SGE ck_i in flight
    reg  [SG_IW-1:0] ck_i;
    reg  ck_end;                    // every SGE checked (ck_i stays at the last)

    // ---------------------------------------------------------------- receive WQE (SEND)
    // hwif RecvWqeCtrl (16 bytes, num_sge in byte 0), then Sge records (addr 8, length 4, lkey
    // 4): at most MAX_RSGE of them and no more than the stride holds (the model's
    // decode_recv_wqe); SGEs without bytes are skipped. The last WQE read is kept (QP, RQ
    // index): the later packets of a SEND find it there, not in host memory.
    localparam integer RW_BYTES = 16 + 16 * MAX_RSGE;
    localparam [15:0] RW_BYTES16 = RW_BYTES[15:0];
    localparam integer RB_BEATS = (RW_BYTES + KW - 1) / KW + 1;
    reg  [RB_BEATS*DATA_WIDTH-1:0] rbuf;
    reg  [7:0]            rb_n;
    reg  [KW_LOG-1:0]     rb_off;    // the WQE's byte offset in the first beat
    reg                   rd_busy;
    reg                   wc_v;      // rbuf holds the receive WQE (wc_q, wc_idx)
    reg  [QP_AW-1:0]      wc_q;
    reg  [15:0]           wc_idx;
    reg  [63:0]           sg_addr [0:MAX_RSGE-1];
    reg  [31:0]           sg_len [0:MAX_RSGE-1];
    reg  [31:0]           sg_key [0:MAX_RSGE-1];
    reg  [34:0]           wc_cap;    // the buffers' bytes
    wire [15:0] rq_slot = rq_ci[q] & ~(16'hffff << c_rqlsize[4:0]);
    wire [ADDR_WIDTH-1:0] wqe_addr = c_rqbase[ADDR_WIDTH-1:0] +
                                     ({{(ADDR_WIDTH-16){1'b0}}, rq_slot} << c_rqlstride[4:0]);
    wire [15:0] stride = 16'd1 << c_rqlstride[3:0];
    wire [15:0] rw_len = (c_rqlstride[4:0] >= 5'd16 || stride >= RW_BYTES16) ? RW_BYTES16
                         : stride;
    wire [16:0] rw_beats = ({1'b0, rw_len} + {{(17-KW_LOG){1'b0}}, wqe_addr[KW_LOG-1:0]} +
                            KW_M1[16:0]) >> KW_LOG;
    wire [RB_BEATS*DATA_WIDTH-1:0] wqe = rbuf >> {rb_off, 3'b000};
    // SGEs the stride holds: (stride - 16) / 16
    wire [15:0] fit = c_rqlstride[4:0] < 5'd4 ? 16'd0 :
                      c_rqlstride[4:0] >= 5'd20 ? 16'hffff :
                      (16'd1 << (c_rqlstride[4:0] - 5'd4)) - 16'd1;
    reg  [34:0] cap_sum;
    integer gk;
    always @* begin
        cap_sum = 35'd0;
        for (gk = 0; gk < MAX_RSGE; gk = gk + 1)
            if (gk < wqe[7:0] && gk < fit)
                cap_sum = cap_sum + {3'd0, wqe[128*(gk+1) + 64 +: 32]};
    end
    reg  [ADDR_WIDTH-1:0] wq_araddr;
    reg  [7:0]            wq_arlen;
    reg                   wq_arvalid;

    // scatter of a SEND packet: SGE sc_i, sc_off bytes into it; lk_rem bytes not yet looked up
    reg  [SG_IW-1:0] sc_i;
    reg  [31:0] sc_off;
    reg  [15:0] lk_rem;
    reg         lk_busy;            // a lookup's segments not all taken
    reg         pl_bad;             // a lookup of the packet failed
    wire [31:0] sc_room = sg_len[sc_i] - sc_off;
    wire [31:0] sc_n = sc_room < {16'd0, lk_rem} ? sc_room : {16'd0, lk_rem};
    wire [31:0] so_far = rr ? rr_off : is_first ? 32'd0 : m_len[q];

    // a fatal NAK while a receive WQE is being filled completes it with fc_status (the model's
    // _fatal_nak: IBA 9.9.3.1 class C/D errors)
    reg         fc_v;
    reg  [7:0]  fc_status;
    reg  [31:0] fc_len;

    // ---------------------------------------------------------------- payload write engine
    // segments (pa, len) from mr_translate -> bursts (within a segment and BURST_I) -> W beats
    // made from the payload bytes, realigned to the target address
    reg                  seg_v;
    reg [ADDR_WIDTH-1:0] seg_pa;
    reg [12:0]           seg_rem;
    reg                  seg_last;   // the last segment of the packet's lookup
    reg [15:0]           pay_rem;    // payload bytes of the packet not yet in a burst
    reg                  bu_v;       // a burst: AW issued (or to issue), its W beats
    reg                  aw_v;
    reg [ADDR_WIDTH-1:0] aw_addr;
    reg [7:0]            aw_len;
    reg [12:0]           bu_rem;     // bytes of the burst not yet in a W beat
    reg [KW_LOG-1:0]     bu_off;     // lane of the next byte
    reg [8:0]            bu_beats;   // W beats left
    reg [7:0]            b_out;      // bursts awaiting B
    reg                  b_err;

    // the payload source: s_pay_*, or for an atomic's original value (pl_atomic) one beat
    // of its 8 bytes, made here (inj) while s_pay_* waits
    reg                    inj;
    reg  [63:0]            inj_data;
    wire [DATA_WIDTH-1:0]  pv_tdata = inj ? {{(DATA_WIDTH-64){1'b0}}, inj_data} : s_pay_tdata;
    wire [KW-1:0]          pv_tkeep = inj ? {{(KW-8){1'b0}}, 8'hff} : s_pay_tkeep;
    wire                   pv_tvalid = inj || s_pay_tvalid;
    wire                   pv_tlast = inj || s_pay_tlast;

    // byte window: payload bytes taken from the stream, not yet written
    reg [2*DATA_WIDTH-1:0] win;
    reg [KW_LOG+1:0]       wcnt;
    reg                    pay_on;   // the packet's payload beats are being taken
    reg                    pay_end;  // its last beat was taken

    wire [31:0] pa_low = {{(32-BURST_LOG){1'b0}}, seg_pa[BURST_LOG-1:0]};
    wire [31:0] to_burst = BURST_I - pa_low;
    reg  [12:0] bl;
    always @* begin
        bl = seg_rem;
        if (to_burst < {19'd0, bl})
            bl = to_burst[12:0];
    end
    wire [13:0] bl_span = {1'b0, bl} + {{(14-KW_LOG){1'b0}}, seg_pa[KW_LOG-1:0]};
    wire [13:0] bl_beats = (bl_span + KW_M1[13:0]) >> KW_LOG;

    // the next W beat: take = bytes of it (from lane bu_off)
    wire [KW_LOG+1:0] room = KW[KW_LOG+1:0] - {2'b00, bu_off};
    wire [KW_LOG+1:0] take = {1'b0, bu_rem} > {{(13-KW_LOG-1){1'b0}}, room} ? room
                             : bu_rem[KW_LOG+1:0];
    wire w_go = bu_v && !aw_v && bu_beats != 9'd0 && wcnt >= take &&
                (!m_axi_wvalid_r || m_axi_wready);
    reg  m_axi_wvalid_r;
    reg  [DATA_WIDTH-1:0] w_data;
    reg  [KW-1:0] w_strb;
    reg  w_last;
    wire [2*DATA_WIDTH-1:0] win_sh = win << {bu_off, 3'b000};
    wire [KW-1:0] strb_go = (~({KW{1'b1}} << take)) << bu_off;

    // refill: one payload beat into the window when it has room
    wire [KW_LOG+1:0] w_after = wcnt - (w_go ? take : {(KW_LOG+2){1'b0}});
    reg  [KW_LOG:0] in_cnt;
    integer kk;
    always @* begin
        in_cnt = {(KW_LOG+1){1'b0}};
        for (kk = 0; kk < KW; kk = kk + 1)
            in_cnt = in_cnt + {{KW_LOG{1'b0}}, pv_tkeep[kk]};
    end
    // the bytes past tkeep (the pad, stale lanes) must not reach the window: it is ORed into
    reg  [DATA_WIDTH-1:0] keep_mask;
    always @* begin
        for (kk = 0; kk < KW; kk = kk + 1)
            keep_mask[8*kk +: 8] = {8{pv_tkeep[kk]}};
    end
    wire refill = pay_on && !pay_end && pv_tvalid && w_after <= KW[KW_LOG+1:0];
    // draining a packet's payload that is not placed
    reg  draining;
    assign s_pay_tready = (refill || draining) && !inj;

    assign m_axi_awaddr = aw_addr;
    assign m_axi_awlen = aw_len;
    assign m_axi_awsize = KW_LOG[2:0];
    assign m_axi_awburst = 2'b01;
    assign m_axi_awvalid = aw_v;
    assign m_axi_wdata = w_data;
    assign m_axi_wstrb = w_strb;
    assign m_axi_wlast = w_last;
    assign m_axi_wvalid = m_axi_wvalid_r;
    assign m_axi_bready = 1'b1;
    wire b_hs = m_axi_bvalid;

    // ---------------------------------------------------------------- READ RESPONSE placement
    // the SGEs of each QP's outstanding READ {pd, lkeys, lengths, addresses}, in a RAM
    localparam RS_W = 32 + MAX_RSGE * 128;
    reg  [RS_W-1:0] rs_mem [0:NUM_QP-1];
    reg  [RS_W-1:0] rs_rd;
    always @(posedge clk) begin
        if (rd_sge_valid)
            rs_mem[rd_sge_qpn[QP_AW-1:0]] <= {rd_sge_pd, rd_sge_lkey, rd_sge_len, rd_sge_addr};
        rs_rd <= rs_mem[pl_qpn[QP_AW-1:0]];
    end
    assign pl_ready = ps == P_IDLE && !rq_scan_any;

    // ---------------------------------------------------------------- READ and atomic
    // the newest RD_RES READs and atomics of each QP, for duplicates: {atomic, its original
    // value, first PSN, packets - 1, rkey, va, length}, in a RAM read during P_CTX (entry j
    // of the QP at ci = j) into rr_*
    localparam RR_B = 24 + 24 + 32 + 64 + 32;
    localparam RR_W = 1 + 64 + RR_B;
    reg  [RR_W-1:0]            rr_mem [0:NUM_QP*RD_RES-1];
    reg  [RR_W-1:0]            rr_rd;
    reg  [NUM_QP*RD_RES-1:0]   rr_v;
    reg  [RD_LOG-1:0]          rr_wp [0:NUM_QP-1];
    reg  [RD_RES*RR_W-1:0]     rr_e;       // (entry j at [j*RR_W +: RR_W])
    wire [QP_AW+RD_LOG-1:0]    rr_raddr = {q, ci[RD_LOG-1:0]};
    reg                        rr_we;
    reg  [QP_AW+RD_LOG-1:0]    rr_waddr;
    reg  [RR_W-1:0]            rr_wdata;
    always @(posedge clk) begin
        rr_rd <= rr_mem[rr_raddr];
        if (rr_we)
            rr_mem[rr_waddr] <= rr_wdata;
    end
    // packets of this READ: max(1, ceil(length / MTU))
    wire [32:0] rd_npk = p_dlen == 32'd0 ? 33'd1 :
                         ({1'b0, p_dlen} + {17'd0, mtu} - 33'd1) >> mtu_log;
    // a duplicate READ asks for the rest of a remembered READ from its PSN (the model's _find
    // and checks): in its PSN range, same rkey, the address of that packet, the same end; a
    // duplicate atomic has the PSN of a remembered atomic (answered with its original value)
    reg         dup_hit;
    reg         at_hit;
    reg  [63:0] at_hit_orig;
    reg  [23:0] dh_d;
    reg  [RR_W-1:0] dh_e;
    integer rj;
    always @* begin
        dup_hit = 1'b0;
        at_hit = 1'b0;
        at_hit_orig = 64'd0;
        for (rj = 0; rj < RD_RES; rj = rj + 1) begin
            dh_e = rr_e[rj*RR_W +: RR_W];
            dh_d = p_psn - dh_e[RR_B-1 -: 24];
            if (rr_v[{q, rj[RD_LOG-1:0]}] && !dh_e[RR_W-1] && dh_d <= dh_e[RR_B-25 -: 24] &&
                p_rkey == dh_e[96 +: 32] &&
                p_va - dh_e[32 +: 64] == ({40'd0, dh_d} << mtu_log) &&
                {1'b0, p_va} + {33'd0, p_dlen} == {1'b0, dh_e[32 +: 64]} + {33'd0, dh_e[0 +: 32]})
                dup_hit = 1'b1;
            if (rr_v[{q, rj[RD_LOG-1:0]}] && dh_e[RR_W-1] && dh_d == 24'd0) begin
                at_hit = 1'b1;
                at_hit_orig = dh_e[RR_B +: 64];
            end
        end
    end
    // the response stream
    reg         rd_dup;         // a replay: no new PSNs, the MSN as it is
    reg  [23:0] rd_k;           // response packet index
    reg  [23:0] rd_npm1;        // packets - 1
    reg  [63:0] rd_va;          // next byte's address
    reg  [31:0] rd_rem;         // bytes from this packet on
    reg  [23:0] rd_msn;
    reg         rd_bad;         // the packet's translation failed
    reg         rd_got;         // the first response of its lookup came
    wire [15:0] rd_n = rd_rem > {16'd0, mtu} ? mtu : rd_rem[15:0];
    wire [7:0]  rd_opc = rd_npm1 == 24'd0 ? 8'h10 :      // READ RESPONSE ONLY
                         rd_k == 24'd0 ? 8'h0d :          // FIRST
                         rd_k == rd_npm1 ? 8'h0f : 8'h0e; // LAST, MIDDLE
    // chunks of the packet's segments: inside one burst window
    wire [31:0] rs_to_burst = BURST_I - {{(32-BURST_LOG){1'b0}}, seg_pa[BURST_LOG-1:0]};
    wire [12:0] rs_len = rs_to_burst < {19'd0, seg_rem} ? rs_to_burst[12:0] : seg_rem;
    wire        rs_valid = ps == P_RDS && seg_v && !rd_bad;
    wire        rs_ready;
    wire        rs_go = rs_valid && rs_ready;
    wire        rs_busy;
    wire [ADDR_WIDTH-1:0] rs_araddr;
    wire [7:0]  rs_arlen;
    wire        rs_arvalid;
    wire        rs_rready;

    wire [2:0] rd_arsize;     // (the responder's AR channel has its own, the same)
    wire [1:0] rd_arburst;
    dma_rd_stream #(
        .DATA_WIDTH(DATA_WIDTH),
        .ADDR_WIDTH(ADDR_WIDTH),
        .PAY_DEPTH(RD_DEPTH),
        .META_DEPTH(16)
    ) u_rd (
        .clk(clk),
        .rst(rst),
        .s_ch_valid(rs_valid),
        .s_ch_ready(rs_ready),
        .s_ch_addr(seg_pa),
        .s_ch_len(rs_len),
        .s_ch_last(seg_last && rs_len == seg_rem),
        .m_axi_araddr(rs_araddr),
        .m_axi_arlen(rs_arlen),
        .m_axi_arsize(rd_arsize),
        .m_axi_arburst(rd_arburst),
        .m_axi_arvalid(rs_arvalid),
        .m_axi_arready(m_axi_arready && !wq_arvalid),
        .m_axi_rdata(m_axi_rdata),
        .m_axi_rresp(m_axi_rresp),
        .m_axi_rlast(m_axi_rlast),
        .m_axi_rvalid(m_axi_rvalid && !rd_busy),
        .m_axi_rready(rs_rready),
        .m_axis_tdata(m_rd_tdata),
        .m_axis_tkeep(m_rd_tkeep),
        .m_axis_tvalid(m_rd_tvalid),
        .m_axis_tready(m_rd_tready),
        .m_axis_tlast(m_rd_tlast),
        .m_axis_tuser(m_rd_tuser),
        .busy(rs_busy)
    );
    // ---------------------------------------------------------------- atomic (IBA 9.4.5)
    // the 8 bytes are read into rbuf the way a receive WQE is (one beat, at byte rb_off) and
    // written back as one beat carrying the new value in every 8-byte lane, the strobes on
    // those 8 bytes
    wire [63:0] at_orig = wqe[63:0];
    wire [63:0] at_new = p_op == 8'h13 ? (at_orig == p_cmp ? p_swap : at_orig)   // CMP_SWAP
                                       : at_orig + p_swap;                         // FETCH_ADD

    // one read port: receive WQE reads start only when the READ reads are done (and no
    // READ chunk is issued while a WQE read is out)
    assign m_axi_arvalid = wq_arvalid || rs_arvalid;
    assign m_axi_araddr = wq_arvalid ? wq_araddr : rs_araddr;
    assign m_axi_arlen = wq_arvalid ? wq_arlen : rs_arlen;
    assign m_axi_arsize = KW_LOG[2:0];
    assign m_axi_arburst = 2'b01;
    assign m_axi_rready = rd_busy || rs_rready;

    // a burst can start from the current segment
    wire bu_start = ps == P_PLACE && seg_v && !bu_v;
    assign mr_rsp_ready = ps == P_CHK || ps == P_RQK || ((ps == P_PLACE || ps == P_RDS) && !seg_v);
    wire place_done = ps == P_PLACE && (pay_rem == 16'd0 || pl_bad) && !bu_v && !seg_v &&
                      !lk_busy;

    // (a response descriptor still waiting keeps its fields: the next packet waits for it)
    assign s_req_ready = ps == P_IDLE && !rq_scan_any && !ack_valid && !pl_valid;

    // a failed QP's RQ doorbells: flush (one QP at a time)
    reg  [NUM_QP-1:0] rq_scan;     // QPs with receive WQEs to flush
    wire rq_scan_any = |rq_scan;
    reg  [QP_AW-1:0] scan_q;
    integer sk;
    always @* begin
        scan_q = {QP_AW{1'b0}};
        for (sk = NUM_QP - 1; sk >= 0; sk = sk - 1)
            if (rq_scan[sk])
                scan_q = sk[QP_AW-1:0];
    end

    // a receive completion for the WQE at rq_ci, which it consumes
    task recv_cqe;
        input [7:0]  opcode;
        input [7:0]  status;
        input [31:0] byte_len;
        input [31:0] imm;
        input [7:0]  flags;
        input [7:0]  vendor;
        begin
            m_cqe_valid <= 1'b1;
            m_cqe_cqn <= c_rcqn[CQN_WIDTH-1:0];
            m_cqe_qpn <= {{(32-QPN_WIDTH){1'b0}}, p_qpn};
            m_cqe_wqe_index <= rq_ci[q];
            m_cqe_opcode <= opcode;
            m_cqe_status <= status;
            m_cqe_byte_len <= byte_len;
            m_cqe_imm <= imm;
            m_cqe_flags <= flags;
            m_cqe_vendor_err <= vendor;
            rq_ci[q] <= rq_ci[q] + 16'd1;
        end
    endtask

    // place the packet's p_len bytes over the SGEs sg_*, from byte `off` of them on (a SEND
    // into its receive WQE, a READ response into the READ's buffers)
    // the next SGE to check, or the end after the last
    task ck_next;
        begin
            if (ck_i == SG_LAST)
                ck_end <= 1'b1;
            else
                ck_i <= ck_i + 1'b1;
        end
    endtask

    task scatter;
        input [31:0] off;
        begin
            pay_rem <= p_len;
            pay_on <= 1'b1;
            pay_end <= 1'b0;
            seg_v <= 1'b0;
            b_err <= 1'b0;
            lk_rem <= p_len;
            lk_busy <= 1'b0;
            pl_bad <= 1'b0;
            sc_i <= {SG_IW{1'b0}};
            sc_off <= off;
            ps <= P_PLACE;
        end
    endtask

    // a READ's rkey for its whole length (a zero-length READ checks nothing, C9-88)
    task rd_check;
        begin
            ck_bad <= 1'b0;
            if (p_dlen != 32'd0) begin
                mr_req_valid <= 1'b1;
                mr_req_key <= p_rkey;
                mr_req_pd <= c_pd;
                mr_req_va <= p_va;
                mr_req_len <= p_dlen;
                ck_first <= 1'b1;
                ck_done <= 1'b0;
            end else begin
                ck_done <= 1'b1;
            end
            ps <= P_CHK;
        end
    endtask

    integer k;
    always @(posedge clk) begin
        cd_v <= 1'b0;
        rr_we <= 1'b0;
        plr_valid <= 1'b0;
        if (ack_valid && ack_ready) begin
            ack_valid <= 1'b0;
            ack_opcode <= OP_ACK;
            ack_payload_len <= 16'd0;
        end
        if (m_cqe_valid && m_cqe_ready)
            m_cqe_valid <= 1'b0;
        if (fail_valid && fail_ready)
            fail_valid <= 1'b0;
        if (mr_req_valid && mr_req_ready)
            mr_req_valid <= 1'b0;
        if (wq_arvalid && m_axi_arready)
            wq_arvalid <= 1'b0;
        if (m_axi_rvalid && rd_busy) begin
            rbuf[rb_n*DATA_WIDTH +: DATA_WIDTH] <= m_axi_rdata;
            rb_n <= rb_n + 8'd1;
        end

        if (cd_v) begin
            case (cd)
                4'd0: begin
                    c_state <= ctx_data[39:32];
                    c_pmtu <= ctx_data[55:48];
                    c_access <= ctx_data[63:56];
                end
                4'd1: c_rcqn <= ctx_data[31:0];
                4'd2: c_pd <= ctx_data[31:0];
                4'd3: begin
                    c_rnr <= ctx_data[31:24];
                    c_dqpn <= ctx_data[63:32];
                end
                4'd4: c_rqpsn <= ctx_data[55:32];
                4'd12: c_rqbase[31:0] <= ctx_data[63:32];
                4'd13: begin
                    c_rqbase[63:32] <= ctx_data[31:0];
                    c_rqlsize <= ctx_data[55:48];
                    c_rqlstride <= ctx_data[63:56];
                end
                default: c_b[{cd_b, 6'd0} +: 64] <= ctx_data;   // words 5..11
            endcase
        end

        // ---- payload write engine
        if (bu_start) begin
            bu_v <= 1'b1;
            aw_v <= 1'b1;
            aw_addr <= {seg_pa[ADDR_WIDTH-1:KW_LOG], {KW_LOG{1'b0}}};
            aw_len <= bl_beats[7:0] - 8'd1;
            bu_rem <= bl;
            bu_off <= seg_pa[KW_LOG-1:0];
            bu_beats <= bl_beats[8:0];
            b_out <= b_out + 8'd1 - {7'd0, b_hs};
            seg_pa <= seg_pa + {{(ADDR_WIDTH-13){1'b0}}, bl};
            seg_rem <= seg_rem - bl;
            seg_v <= seg_rem != bl;
            pay_rem <= pay_rem - {3'd0, bl};
        end else if (b_hs) begin
            b_out <= b_out - 8'd1;
        end
        if (b_hs && m_axi_bresp != 2'b00)
            b_err <= 1'b1;
        if (aw_v && m_axi_awready)
            aw_v <= 1'b0;
        if (m_axi_wvalid_r && m_axi_wready)
            m_axi_wvalid_r <= 1'b0;
        if (w_go) begin
            m_axi_wvalid_r <= 1'b1;
            w_data <= win_sh[DATA_WIDTH-1:0];
            w_strb <= strb_go;
            w_last <= bu_beats == 9'd1;
            bu_beats <= bu_beats - 9'd1;
            bu_rem <= bu_rem - {{(13-KW_LOG-2){1'b0}}, take};
            bu_off <= {KW_LOG{1'b0}};
            if (bu_beats == 9'd1)
                bu_v <= 1'b0;
        end
        // window: take `take` bytes out (w_go), one payload beat in (refill)
        begin : window
            reg [2*DATA_WIDTH-1:0] nw;
            nw = w_go ? (win >> {take, 3'b000}) : win;
            if (refill)
                nw = nw | ({{DATA_WIDTH{1'b0}}, pv_tdata & keep_mask} << {w_after, 3'b000});
            win <= nw;
            wcnt <= w_after + (refill ? {1'b0, in_cnt} : {(KW_LOG+2){1'b0}});
        end
        if (refill && pv_tlast)
            pay_end <= 1'b1;
        if (refill && inj)
            inj <= 1'b0;
        if (draining && s_pay_tvalid && s_pay_tlast)
            draining <= 1'b0;

        // ---- the packet FSM
        case (ps)
            P_IDLE: begin
                if (rq_scan_any) begin
                    q <= scan_q;
                    p_qpn <= {{(QPN_WIDTH-QP_AW){1'b0}}, scan_q};
                    ci <= 4'd0;
                    ps <= P_SCAN;
                end else if (pl_valid) begin    // a READ response's payload
                    q <= pl_qpn[QP_AW-1:0];
                    p_qpn <= pl_qpn;
                    p_op <= 8'h10;             // (neither a SEND nor a WRITE)
                    p_len <= pl_len;
                    rr_off <= pl_off;
                    inj <= pl_atomic && !pl_drop;
                    inj_data <= pl_data;
                    if (pl_drop) begin
                        drain_after <= 1'b1;
                        ps <= P_DRAIN;
                    end else begin
                        rr <= 1'b1;
                        ps <= P_RRL;
                    end
                end else if (s_req_valid && !ack_valid) begin
                    q <= s_req_qpn[QP_AW-1:0];
                    p_qpn <= s_req_qpn;
                    p_op <= s_req_opcode;
                    p_psn <= s_req_psn;
                    p_ackreq <= s_req_ackreq;
                    p_pad <= s_req_padcount;
                    p_len <= s_req_payload_len;
                    p_va <= s_atomic ? s_req_atomic_va : s_req_reth_va;
                    p_rkey <= s_atomic ? s_req_atomic_rkey : s_req_reth_rkey;
                    p_dlen <= s_atomic ? 32'd8 : s_req_reth_len;
                    p_swap <= s_req_atomic_swap_add;
                    p_cmp <= s_req_atomic_compare;
                    p_imm <= s_req_imm;
                    p_ieth <= s_req_ieth;
                    p_ipv6 <= s_req_ipv6;
                    p_sip <= s_req_sip;
                    p_dip <= s_req_dip;
                    p_pkey <= s_req_pkey;
                    cnt_requests <= cnt_requests + 32'd1;
                    ci <= 4'd0;
                    ps <= P_CTX;
                end
            end

            P_CTX: begin
                cd <= ci;
                cd_v <= 1'b1;
                ci <= ci + 4'd1;
                if (ci != 4'd0 && ci <= RD_RES)     // the QP's remembered READs
                    rr_e[{28'd0, ci_m1} * RR_W +: RR_W] <= rr_rd;
                if (ci == 4'd13)
                    ps <= P_EVAL;
            end

            P_EVAL: begin
                if (!cd_v) begin
                    c_sport <= {2'b11, sp_low};
                    drain_after <= p_len != 16'd0;
                    fail_after <= 1'b0;
                    if (epsn_stale[q]) begin
                        epsn[q] <= c_rqpsn;
                        epsn_stale[q] <= 1'b0;
                    end
                    // (a QP failed here is in ERR, even before its table entry says so)
                    if (c_state != QPS_RTR && c_state != QPS_RTS && c_state != QPS_SQD ||
                        rfail[q] || !path_ok) begin
                        cnt_dropped <= cnt_dropped + 32'd1;
                        ps <= P_DRAIN;                     // not receiving, not its path: dropped
                    end else if (pd_ != 24'd0 && !pd_[23]) begin   // ahead: sequence error
                        if (!nak_sent[q]) begin
                            nak_sent[q] <= 1'b1;
                            ack_psn <= ep;
                            ack_syndrome <= SYN_NAK_SEQ;
                            ack_msn <= msn[q];
                            cnt_naks <= cnt_naks + 32'd1;
                            ps <= P_ACK;
                        end else begin
                            ps <= P_DRAIN;
                        end
                    end else if (pd_ != 24'd0) begin       // behind: a duplicate
                        cnt_duplicates <= cnt_duplicates + 32'd1;
                        if (p_ackreq && (is_write || p_op <= 8'h05)) begin
                            ack_psn <= ep - 24'd1;
                            ack_syndrome <= {3'b000, credit_code(rq_free)};
                            ack_msn <= msn[q];
                            cnt_acks <= cnt_acks + 32'd1;
                            ps <= P_ACK;
                        end else if (is_read && dup_hit) begin   // replayed from its PSN
                            ack_psn <= p_psn;
                            ack_msn <= msn[q];
                            rd_dup <= 1'b1;
                            if (!c_access[2]) begin            // no REMOTE_READ (any more)
                                ack_syndrome <= SYN_NAK_REM_ACCESS;
                                fail_after <= 1'b1;
                                cnt_naks <= cnt_naks + 32'd1;
                                ps <= P_ACK;
                            end else begin
                                rd_check;
                            end
                        end else if (is_atomic && at_hit) begin
                            // answered again from its original value, never executed twice
                            // (IBA 9.7.5.1.1), with the current MSN (as the model)
                            ack_psn <= p_psn;
                            ack_msn <= msn[q];
                            ack_syndrome <= SYN_ACK_UNLIMITED;
                            ack_opcode <= OP_ATOMIC_ACK;
                            ack_orig <= at_hit_orig;
                            ps <= P_ACK;
                        end else begin
                            ps <= P_DRAIN;
                        end
                    end else begin
                        nak_sent[q] <= 1'b0;
                        ack_psn <= p_psn;
                        ack_msn <= msn[q];
                        if (!(is_write || is_send || is_read || is_atomic) || !seq_ok ||
                            (!is_read && !is_atomic && !len_ok) ||
                            (is_write && is_first && first_len_bad) ||
                            (is_write && !is_first && cont_len_bad)) begin
                            ack_syndrome <= SYN_NAK_INV_REQ;   // (length errors too)
                            fail_after <= 1'b1;
                            fc_v <= in_send[q];
                            fc_status <= 8'd9;                 // REM_INV_REQ_ERR
                            fc_len <= m_len[q];
                            cnt_naks <= cnt_naks + 32'd1;
                            ps <= P_ACK;
                        end else if (is_atomic) begin
                            cnt_atomics <= cnt_atomics + 32'd1;
                            if (p_va[2:0] != 3'd0) begin       // not 8-byte aligned (C9-...)
                                ack_syndrome <= SYN_NAK_INV_REQ;
                                fail_after <= 1'b1;
                                cnt_naks <= cnt_naks + 32'd1;
                                ps <= P_ACK;
                            end else if (!c_access[3]) begin   // no REMOTE_ATOMIC on the QP
                                ack_syndrome <= SYN_NAK_REM_ACCESS;
                                fail_after <= 1'b1;
                                cnt_naks <= cnt_naks + 32'd1;
                                ps <= P_ACK;
                            end else begin                     // the rkey for the 8 bytes
                                mr_req_valid <= 1'b1;
                                mr_req_key <= p_rkey;
                                mr_req_pd <= c_pd;
                                mr_req_va <= p_va;
                                mr_req_len <= 32'd8;
                                ck_first <= 1'b1;
                                ck_bad <= 1'b0;
                                ck_done <= 1'b0;
                                ps <= P_CHK;
                            end
                        end else if (is_read) begin
                            rd_dup <= 1'b0;
                            if (!c_access[2]) begin            // no REMOTE_READ on the QP
                                ack_syndrome <= SYN_NAK_REM_ACCESS;
                                fail_after <= 1'b1;
                                cnt_naks <= cnt_naks + 32'd1;
                                ps <= P_ACK;
                            end else if (p_dlen > 32'h8000_0000) begin   // C9-92
                                ack_syndrome <= SYN_NAK_INV_REQ;
                                fail_after <= 1'b1;
                                cnt_naks <= cnt_naks + 32'd1;
                                ps <= P_ACK;
                            end else begin
                                rd_check;
                            end
                        end else if (is_send) begin
                            if (is_first && rq_empty) begin    // RNR NAK (IBA 9.7.5.2.8)
                                nak_sent[q] <= 1'b1;
                                ack_syndrome <= {3'b001, c_rnr[4:0]};
                                cnt_naks <= cnt_naks + 32'd1;
                                ps <= P_ACK;
                            end else begin
                                ps <= P_RQW;
                            end
                        end else if (!c_access[1]) begin    // no REMOTE_WRITE on the QP
                            ack_syndrome <= SYN_NAK_REM_ACCESS;
                            fail_after <= 1'b1;
                            cnt_naks <= cnt_naks + 32'd1;
                            ps <= P_ACK;
                        end else if (is_first && p_dlen != 32'd0) begin
                            mr_req_valid <= 1'b1;          // the rkey, for the whole length
                            mr_req_key <= p_rkey;
                            mr_req_pd <= c_pd;
                            mr_req_va <= p_va;
                            mr_req_len <= p_dlen;
                            ck_first <= 1'b1;
                            ck_bad <= 1'b0;
                            ck_done <= 1'b0;
                            ps <= P_CHK;
                        end else begin
                            if (is_first) begin             // a zero-length WRITE
                                m_va[q] <= p_va;
                                m_rkey[q] <= p_rkey;
                                m_len[q] <= 32'd0;
                                m_cap[q] <= 32'd0;
                            end
                            ps <= P_CHK;
                            ck_done <= 1'b1;
                            ck_bad <= 1'b0;
                        end
                    end
                end
            end

            P_CHK: begin
                if (mr_rsp_valid && !ck_done) begin
                    if (ck_first && is_atomic)     // (8 aligned bytes: one segment)
                        seg_pa <= mr_rsp_pa;
                    ck_first <= mr_rsp_last;
                    if (ck_first && mr_rsp_status != 3'd0)
                        ck_bad <= 1'b1;
                    if (mr_rsp_last)
                        ck_done <= 1'b1;
                end
                if (ck_done && !mr_req_valid) begin
                    if (ck_bad) begin
                        ack_syndrome <= SYN_NAK_REM_ACCESS;
                        fail_after <= 1'b1;
                        cnt_naks <= cnt_naks + 32'd1;
                        ps <= P_ACK;
                    end else if (is_read) begin
                        ps <= P_RD0;
                    end else if (is_atomic) begin
                        ps <= P_ATR;
                    end else if (is_last && has_imm && rq_empty) begin   // RNR NAK
                        nak_sent[q] <= 1'b1;
                        ack_syndrome <= {3'b001, c_rnr[4:0]};
                        cnt_naks <= cnt_naks + 32'd1;
                        ps <= P_ACK;
                        if (is_first) begin
                            m_va[q] <= p_va;
                            m_rkey[q] <= p_rkey;
                            m_len[q] <= 32'd0;
                            m_cap[q] <= p_dlen;
                        end
                    end else begin
                        if (is_first) begin
                            m_va[q] <= p_va;
                            m_rkey[q] <= p_rkey;
                            m_len[q] <= 32'd0;
                            m_cap[q] <= p_dlen;
                        end
                        if (p_len != 16'd0) begin        // translate this packet's bytes
                            mr_req_valid <= 1'b1;
                            mr_req_key <= is_first ? p_rkey : m_rkey[q];
                            mr_req_pd <= c_pd;
                            mr_req_va <= is_first ? p_va : m_va[q];
                            mr_req_len <= {16'd0, p_len};
                            pay_rem <= p_len;
                            pay_on <= 1'b1;
                            pay_end <= 1'b0;
                            seg_v <= 1'b0;
                            b_err <= 1'b0;
                            lk_rem <= 16'd0;
                            lk_busy <= 1'b1;
                            pl_bad <= 1'b0;
                            ps <= P_PLACE;
                        end else begin
                            ps <= P_DONE;
                        end
                    end
                end
            end

            P_RD0: begin        // READ checked: a new one takes its PSNs and counts (C9-148)
                if (!rd_dup) begin
                    epsn[q] <= p_psn + rd_npk[23:0];
                    msn[q] <= msn[q] + 24'd1;
                    rd_msn <= msn[q] + 24'd1;
                    unacked[q] <= 5'd0;
                    rr_we <= 1'b1;
                    rr_waddr <= {q, rr_wp[q]};
                    rr_wdata <= {1'b0, 64'd0, p_psn, rd_npk[23:0] - 24'd1, p_rkey, p_va, p_dlen};
                    rr_v[{q, rr_wp[q]}] <= 1'b1;
                    rr_wp[q] <= rr_wp[q] + 1'b1;
                end else begin
                    rd_msn <= msn[q];
                end
                rd_k <= 24'd0;
                rd_npm1 <= rd_npk[23:0] - 24'd1;
                rd_va <= p_va;
                rd_rem <= p_dlen;
                ps <= P_RDT;
            end

            P_ATR: begin        // the 8 bytes: after the READ response reads and every write
                if (!rd_busy && !wq_arvalid && !rs_busy && b_out == 8'd0) begin
                    wq_arvalid <= 1'b1;
                    wq_araddr <= {seg_pa[ADDR_WIDTH-1:KW_LOG], {KW_LOG{1'b0}}};
                    wq_arlen <= 8'd0;
                    rb_off <= seg_pa[KW_LOG-1:0];
                    rb_n <= 8'd0;
                    rd_busy <= 1'b1;
                    wc_v <= 1'b0;               // (rbuf no longer holds a receive WQE)
                    ps <= P_ATD;
                end
            end

            P_ATD: begin        // the beat in (into rbuf)
                if (rd_busy && m_axi_rvalid && m_axi_rlast) begin
                    rd_busy <= 1'b0;
                    ps <= P_ATX;
                end
            end

            P_ATX: begin        // executed: write back, remember, advance
                ack_orig <= at_orig;
                aw_v <= 1'b1;
                aw_addr <= {seg_pa[ADDR_WIDTH-1:KW_LOG], {KW_LOG{1'b0}}};
                aw_len <= 8'd0;
                w_data <= {(DATA_WIDTH/64){at_new}};
                w_strb <= (~({KW{1'b1}} << 8)) << seg_pa[KW_LOG-1:0];
                w_last <= 1'b1;
                b_out <= b_out + 8'd1;
                // a duplicate of it is answered from here (IBA 9.7.5.1.1, o9-28)
                rr_we <= 1'b1;
                rr_waddr <= {q, rr_wp[q]};
                rr_wdata <= {1'b1, at_orig, p_psn, 24'd0, p_rkey, p_va, p_dlen};
                rr_v[{q, rr_wp[q]}] <= 1'b1;
                rr_wp[q] <= rr_wp[q] + 1'b1;
                epsn[q] <= p_psn + 24'd1;
                msn[q] <= msn[q] + 24'd1;
                ack_msn <= msn[q] + 24'd1;
                unacked[q] <= 5'd0;
                ps <= P_ATW;
            end

            P_ATW: begin        // the W beat, once the AW is taken (as the write engine)
                if (!aw_v) begin
                    m_axi_wvalid_r <= 1'b1;
                    ps <= P_ATB;
                end
            end

            P_ATB: begin        // the write answered: it is in memory before the ACK goes
                if (b_out == 8'd0 && !m_axi_wvalid_r) begin
                    ack_syndrome <= SYN_ACK_UNLIMITED;
                    ack_opcode <= OP_ATOMIC_ACK;
                    ps <= P_ACK;
                end
            end

            P_RDT: begin        // translate the packet's bytes (the rkey must still stand)
                rd_bad <= 1'b0;
                rd_got <= 1'b0;
                seg_v <= 1'b0;
                if (rd_n == 16'd0) begin
                    ps <= P_RDH;
                end else if (!mr_req_valid) begin
                    mr_req_valid <= 1'b1;
                    mr_req_key <= p_rkey;
                    mr_req_pd <= c_pd;
                    mr_req_va <= rd_va;
                    mr_req_len <= {16'd0, rd_n};
                    ps <= P_RDS;
                end
            end

            P_RDS: begin        // each segment -> chunks of one burst -> dma_rd_stream
                if (mr_rsp_valid && !seg_v) begin
                    seg_v <= mr_rsp_len != 13'd0 && mr_rsp_status == 3'd0 && !rd_bad;
                    seg_pa <= mr_rsp_pa;
                    seg_rem <= mr_rsp_len;
                    seg_last <= mr_rsp_last;
                    if (mr_rsp_status != 3'd0)
                        rd_bad <= 1'b1;
                    if (mr_rsp_last)
                        rd_got <= 1'b1;
                end
                if (rs_go) begin
                    seg_pa <= seg_pa + {{(ADDR_WIDTH-13){1'b0}}, rs_len};
                    seg_rem <= seg_rem - rs_len;
                    seg_v <= seg_rem != rs_len;
                end
                if (rd_got && !seg_v && !mr_req_valid)
                    ps <= P_RDH;
            end

            P_RDH: begin        // the packet's descriptor (its bytes are on their way)
                if (!ack_valid) begin
                    ack_psn <= p_psn + rd_k;
                    if (rd_bad) begin           // NAK remote access at this PSN
                        ack_syndrome <= SYN_NAK_REM_ACCESS;
                        ack_msn <= msn[q];
                        fail_after <= 1'b1;
                        cnt_naks <= cnt_naks + 32'd1;
                        ps <= P_ACK;
                    end else begin
                        ack_valid <= 1'b1;
                        ack_opcode <= rd_opc;
                        ack_payload_len <= rd_n;
                        ack_syndrome <= SYN_ACK_UNLIMITED;
                        ack_msn <= rd_msn;
                        rd_k <= rd_k + 24'd1;
                        rd_va <= rd_va + {48'd0, rd_n};
                        rd_rem <= rd_rem - {16'd0, rd_n};
                        if (rd_k == rd_npm1)
                            ps <= drain_after ? P_DRAIN : P_IDLE;
                        else
                            ps <= P_RDT;
                    end
                end
            end

            P_RRL: begin        // the READ's SGEs (read from rs_mem in P_IDLE)
                for (gk = 0; gk < MAX_RSGE; gk = gk + 1) begin
                    sg_addr[gk] <= rs_rd[64*gk +: 64];
                    sg_len[gk] <= rs_rd[64*MAX_RSGE + 32*gk +: 32];
                    sg_key[gk] <= rs_rd[96*MAX_RSGE + 32*gk +: 32];
                end
                c_pd <= rs_rd[RS_W-1 -: 32];
                scatter(rr_off);
            end

            P_PLACE: begin
                if (mr_rsp_valid && !seg_v) begin
                    seg_v <= mr_rsp_len != 13'd0;
                    seg_pa <= mr_rsp_pa;
                    seg_rem <= mr_rsp_len;
                    seg_last <= mr_rsp_last;
                    if (mr_rsp_last)
                        lk_busy <= 1'b0;
                    if (mr_rsp_status != 3'd0)
                        pl_bad <= 1'b1;
                end
                // SEND: the next piece of the packet, from the SGE holding its next byte
                if ((is_send || rr) && lk_rem != 16'd0 && !lk_busy && !mr_req_valid && !pl_bad) begin
                    if (sg_len[sc_i] <= sc_off) begin
                        // (never at the last SGE: P_SCAP made sure the packet fits the
                        // receive buffers, the completer that a READ response fits its SGEs;
                        // the assertion below checks it in simulation)
                        sc_off <= sc_off - sg_len[sc_i];
                        if (sc_i != SG_LAST)
                            sc_i <= sc_i + 1'b1;
                    end else begin
                        mr_req_valid <= 1'b1;
                        mr_req_key <= sg_key[sc_i];
                        mr_req_pd <= c_pd;
                        mr_req_va <= sg_addr[sc_i] + {32'd0, sc_off};
                        mr_req_len <= sc_n;
                        sc_off <= sc_off + sc_n;
                        lk_rem <= lk_rem - sc_n[15:0];
                        lk_busy <= 1'b1;
                    end
                end
                if (place_done && !mr_req_valid)
                    ps <= P_WAITB;
            end

            P_WAITB: begin      // every burst of the packet answered
                if (pl_bad) begin
                    // a translation failed (the buffer was deregistered under the message):
                    // the rest of the payload is dropped, then the fatal NAK
                    if (pay_on) begin
                        pay_on <= 1'b0;
                        draining <= !inj && !pay_end && !(refill && pv_tlast);
                        inj <= 1'b0;
                        wcnt <= {(KW_LOG+2){1'b0}};
                        win <= {2*DATA_WIDTH{1'b0}};
                    end else if (b_out == 8'd0 && !aw_v && !m_axi_wvalid_r && !draining &&
                                 rr) begin          // a READ response: the completer fails it
                        plr_valid <= 1'b1;
                        plr_ok <= 1'b0;
                        rr <= 1'b0;
                        ps <= P_IDLE;
                    end else if (b_out == 8'd0 && !aw_v && !m_axi_wvalid_r && !draining) begin
                        ack_psn <= p_psn;
                        ack_syndrome <= is_send ? SYN_NAK_REM_OP : SYN_NAK_REM_ACCESS;
                        fc_v <= is_send;
                        fc_status <= 8'd4;                  // LOC_PROT_ERR
                        fc_len <= so_far;
                        fail_after <= 1'b1;
                        drain_after <= 1'b0;
                        cnt_naks <= cnt_naks + 32'd1;
                        ps <= P_ACK;
                    end
                end else if (b_out == 8'd0 && !aw_v && !m_axi_wvalid_r && (!pay_on || pay_end) &&
                             rr) begin
                    pay_on <= 1'b0;
                    plr_valid <= 1'b1;
                    plr_ok <= 1'b1;
                    rr <= 1'b0;
                    ps <= P_IDLE;
                end else if (b_out == 8'd0 && !aw_v && !m_axi_wvalid_r && (!pay_on || pay_end)) begin
                    pay_on <= 1'b0;
                    cnt_bytes <= cnt_bytes + {16'd0, p_len};
                    m_va[q] <= m_va[q] + {48'd0, p_len};
                    m_len[q] <= m_len[q] + {16'd0, p_len};
                    if (is_first) begin
                        m_va[q] <= p_va + {48'd0, p_len};
                        m_len[q] <= {16'd0, p_len};
                    end
                    ps <= P_DONE;
                end
            end

            P_DONE: begin       // the packet is placed: complete the message, advance, ACK
                drain_after <= 1'b0;
                epsn[q] <= p_psn + 24'd1;
                if (is_last) begin
                    in_write[q] <= 1'b0;
                    in_send[q] <= 1'b0;
                    msn[q] <= msn[q] + 24'd1;
                    ack_msn <= msn[q] + 24'd1;
                end else begin
                    in_write[q] <= is_write;
                    in_send[q] <= is_send;
                end
                if (is_last && is_send) begin
                    recv_cqe(8'd128, 8'd0, m_len[q],                 // RECV
                             has_inv ? p_ieth : has_imm ? p_imm : 32'd0,
                             has_inv ? 8'd2 : has_imm ? 8'd1 : 8'd0, 8'd0);  // WITH_INV, _IMM
                    wc_v <= 1'b0;
                end
                if (is_last && is_write && has_imm) begin
                    // RECV_RDMA_WITH_IMM, WITH_IMM
                    recv_cqe(8'd129, 8'd0, m_cap[q], p_imm, 8'd1, 8'd0);
                end
                ack_psn <= p_psn;
                ack_syndrome <= {3'b000, credit_code(rq_free -
                                 ((is_last && (has_imm || is_send)) ? 16'd1 : 16'd0))};
                if (p_ackreq || unacked[q] + 5'd1 >= ACK_EVERY) begin
                    unacked[q] <= 5'd0;
                    ack_due <= 1'b1;
                    cnt_acks <= cnt_acks + 32'd1;
                end else begin
                    unacked[q] <= unacked[q] + 5'd1;
                    ack_due <= 1'b0;
                end
                ps <= P_CQE;
            end

            P_CQE: begin        // the completion taken, then the ACK if one is due
                if (!m_cqe_valid || m_cqe_ready)
                    ps <= ack_due ? P_ACK : P_IDLE;
            end

            P_ACK: begin
                if (!ack_valid) begin
                    ack_valid <= 1'b1;
                    if (fail_after)
                        ps <= P_FAIL;
                    else
                        ps <= drain_after ? P_DRAIN : P_IDLE;
                end
            end

            P_DRAIN: begin      // the payload beats of a packet not placed
                if (drain_after) begin
                    draining <= 1'b1;
                    drain_after <= 1'b0;
                end else if (!draining) begin
                    ps <= P_IDLE;
                end
            end

            P_FAIL: begin       // the QP fails: the completer flushes the SQ; flush the RQ
                wc_v <= 1'b0;
                if (fc_v) begin     // first the receive WQE being filled, with the error
                    if (!m_cqe_valid || m_cqe_ready) begin
                        recv_cqe(8'd128, fc_status, fc_len, 32'd0, 8'd0, 8'd0);
                        fc_v <= 1'b0;
                    end
                end else if (!fail_valid) begin
                    fail_valid <= 1'b1;
                    fail_qpn <= p_qpn;
                    in_write[q] <= 1'b0;
                    in_send[q] <= 1'b0;
                    rfail[q] <= 1'b1;
                    ps <= P_FLUSH;
                end
            end

            P_FLUSH: begin      // each posted receive WQE completes WR_FLUSH_ERR
                if (!m_cqe_valid || m_cqe_ready) begin
                    if (rq_empty) begin
                        ps <= drain_after ? P_DRAIN : P_IDLE;
                    end else begin
                        // RECV, WR_FLUSH_ERR, vendor FLUSHED
                        recv_cqe(8'd128, 8'd5, 32'd0, 32'd0, 8'd0, 8'h50);
                    end
                end
            end

            P_RQW: begin        // the receive WQE at rq_ci: cached, or read from the ring
                if (wc_v && wc_q == q && wc_idx == rq_ci[q] && !rd_busy) begin
                    ps <= P_RQC;
                end else if (!rd_busy && !wq_arvalid && !rs_busy) begin
                    // (after the READ response reads: R data of this ID comes in order)
                    wq_arvalid <= 1'b1;
                    wq_araddr <= {wqe_addr[ADDR_WIDTH-1:KW_LOG], {KW_LOG{1'b0}}};
                    wq_arlen <= rw_beats[7:0] - 8'd1;
                    rb_off <= wqe_addr[KW_LOG-1:0];
                    rb_n <= 8'd0;
                    rd_busy <= 1'b1;
                    wc_v <= 1'b0;
                end else if (rd_busy && m_axi_rvalid && m_axi_rlast) begin
                    rd_busy <= 1'b0;
                    wc_v <= 1'b1;
                    wc_q <= q;
                    wc_idx <= rq_ci[q];
                    ps <= P_RQC;
                end
            end

            P_RQC: begin        // its SGEs (those past num_sge or the stride: no bytes)
                for (gk = 0; gk < MAX_RSGE; gk = gk + 1) begin
                    sg_addr[gk] <= wqe[128*(gk+1) +: 64];
                    sg_len[gk] <= (gk < wqe[7:0] && gk < fit) ? wqe[128*(gk+1) + 64 +: 32]
                                                              : 32'd0;
                    sg_key[gk] <= wqe[128*(gk+1) + 96 +: 32];
                end
                wc_cap <= cap_sum;
                ck_i <= {SG_IW{1'b0}};
                ck_end <= 1'b0;
                ck_wait <= 1'b0;
                ck_bad <= 1'b0;
                ps <= is_first ? P_RQK : P_SCAP;
            end

            P_RQK: begin        // a new message: every SGE's lkey, PD, LOCAL_WRITE, bounds
                if (ck_wait) begin
                    if (mr_rsp_valid) begin
                        if (ck_first && mr_rsp_status != 3'd0)
                            ck_bad <= 1'b1;
                        ck_first <= mr_rsp_last;
                        if (mr_rsp_last) begin
                            ck_wait <= 1'b0;
                            ck_next;
                        end
                    end
                end else if (!mr_req_valid) begin
                    if (ck_bad) begin   // NAK remote operational error, LOC_PROT_ERR
                        ack_syndrome <= SYN_NAK_REM_OP;
                        fail_after <= 1'b1;
                        fc_v <= 1'b1;
                        fc_status <= 8'd4;
                        fc_len <= 32'd0;
                        cnt_naks <= cnt_naks + 32'd1;
                        ps <= P_ACK;
                    end else if (ck_end) begin
                        ps <= P_SCAP;
                    end else if (sg_len[ck_i] == 32'd0) begin
                        ck_next;
                    end else begin
                        mr_req_valid <= 1'b1;
                        mr_req_key <= sg_key[ck_i];
                        mr_req_pd <= c_pd;
                        mr_req_va <= sg_addr[ck_i];
                        mr_req_len <= sg_len[ck_i];
                        ck_wait <= 1'b1;
                        ck_first <= 1'b1;
                    end
                end
            end

            P_SCAP: begin       // the message must fit the receive buffers (IBA 9.7.5.2.4)
                if ({3'd0, so_far} + {19'd0, p_len} > wc_cap) begin
                    ack_syndrome <= SYN_NAK_INV_REQ;
                    fail_after <= 1'b1;
                    fc_v <= 1'b1;
                    fc_status <= 8'd1;                  // LOC_LEN_ERR
                    fc_len <= so_far;
                    cnt_naks <= cnt_naks + 32'd1;
                    ps <= P_ACK;
                end else begin
                    if (is_first)
                        m_len[q] <= 32'd0;
                    if (p_len == 16'd0) begin
                        ps <= P_DONE;
                    end else begin
                        scatter(so_far);
                    end
                end
            end

            default: begin      // P_SCAN: a doorbell of a failed QP: its recv CQN, then flush
                cd <= ci;
                cd_v <= 1'b1;
                ci <= ci + 4'd1;
                if (ci == 4'd3) begin     // (word 2, the recv CQN, is in by now)
                    rq_scan[q] <= 1'b0;
                    drain_after <= 1'b0;
                    ps <= P_FLUSH;
                end
            end
        endcase

        // RQ doorbells, QP configuration, rq_psn set
        if (rq_db_valid && {{(32-QPN_WIDTH){1'b0}}, rq_db_qpn} < NUM_QP) begin
            rq_pi[rq_db_qpn[QP_AW-1:0]] <= rq_db_pi;
            if (rfail[rq_db_qpn[QP_AW-1:0]])
                rq_scan[rq_db_qpn[QP_AW-1:0]] <= 1'b1;
        end
        if (rq_psn_set_valid)
            epsn_stale[rq_psn_set_qpn[QP_AW-1:0]] <= 1'b1;
        if (cfg_valid) begin
            rq_pi[cfg_qpn[QP_AW-1:0]] <= 16'd0;
            rq_ci[cfg_qpn[QP_AW-1:0]] <= 16'd0;
            in_write[cfg_qpn[QP_AW-1:0]] <= 1'b0;
            in_send[cfg_qpn[QP_AW-1:0]] <= 1'b0;
            if (wc_q == cfg_qpn[QP_AW-1:0])
                wc_v <= 1'b0;
            nak_sent[cfg_qpn[QP_AW-1:0]] <= 1'b0;
            rfail[cfg_qpn[QP_AW-1:0]] <= 1'b0;
            rq_scan[cfg_qpn[QP_AW-1:0]] <= 1'b0;
            unacked[cfg_qpn[QP_AW-1:0]] <= 5'd0;
            msn[cfg_qpn[QP_AW-1:0]] <= 24'd0;
            rr_wp[cfg_qpn[QP_AW-1:0]] <= {RD_LOG{1'b0}};
            for (k = 0; k < RD_RES; k = k + 1)
                rr_v[{cfg_qpn[QP_AW-1:0], k[RD_LOG-1:0]}] <= 1'b0;
        end

        if (rst) begin
            ps <= P_IDLE;
            cd_v <= 1'b0;
            ack_valid <= 1'b0;
            ack_opcode <= OP_ACK;
            ack_payload_len <= 16'd0;
            rr_v <= {(NUM_QP*RD_RES){1'b0}};
            rr <= 1'b0;
            plr_valid <= 1'b0;
            m_cqe_valid <= 1'b0;
            fail_valid <= 1'b0;
            mr_req_valid <= 1'b0;
            seg_v <= 1'b0;
            bu_v <= 1'b0;
            aw_v <= 1'b0;
            m_axi_wvalid_r <= 1'b0;
            b_out <= 8'd0;
            wcnt <= {(KW_LOG+2){1'b0}};
            win <= {2*DATA_WIDTH{1'b0}};
            pay_on <= 1'b0;
            pay_end <= 1'b0;
            draining <= 1'b0;
            in_write <= {NUM_QP{1'b0}};
            in_send <= {NUM_QP{1'b0}};
            wc_v <= 1'b0;
            rd_busy <= 1'b0;
            wq_arvalid <= 1'b0;
            fc_v <= 1'b0;
            lk_busy <= 1'b0;
            pl_bad <= 1'b0;
            inj <= 1'b0;
            nak_sent <= {NUM_QP{1'b0}};
            epsn_stale <= {NUM_QP{1'b1}};
            rfail <= {NUM_QP{1'b0}};
            rq_scan <= {NUM_QP{1'b0}};
            cnt_requests <= 32'd0;
            cnt_bytes <= 32'd0;
            cnt_acks <= 32'd0;
            cnt_naks <= 32'd0;
            cnt_duplicates <= 32'd0;
            cnt_dropped <= 32'd0;
            cnt_atomics <= 32'd0;
            for (k = 0; k < NUM_QP; k = k + 1) begin
                rq_pi[k] <= 16'd0;
                rq_ci[k] <= 16'd0;
                msn[k] <= 24'd0;
                unacked[k] <= 5'd0;
                rr_wp[k] <= {RD_LOG{1'b0}};
            end
        end
    end

`ifndef SYNTHESIS
    // The scatter never steps past the last SGE: P_SCAP made sure a SEND's packet fits the
    // receive buffers, the completer that a READ response fits the READ's SGEs. (An index past
    // MAX_RSGE - 1 would read X here and, in hardware, wrap to SGE 0.) Stop if it would.
    always @(posedge clk) begin
        if (!rst && ps == P_PLACE && (is_send || rr) && lk_rem != 16'd0 && !lk_busy &&
            !mr_req_valid && !pl_bad && sg_len[sc_i] <= sc_off && sc_i == SG_LAST) begin
            $display("%m: ASSERTION FAILED: scatter past the last SGE (%0d bytes past it)",
                     sc_off - sg_len[sc_i]);
            $finish;
        end
    end
`endif

    /* verilator lint_off UNUSEDSIGNAL */
    wire unused = &{1'b0, b_err, rd_npk[32:24], c_pd, to_burst[31:13], c_dqpn[31:24], c_rcqn,
                    pad_of_len, mtu,
                    // QP numbers past the QPs there are (the QP tables are indexed by the low
                    // bits), context bits this block has no use for, the spans' top bits
                    // (a WQE or a burst is fewer beats), the shifted window's upper half and
                    // the read stream's fixed burst type and size
                    rq_psn_set_qpn[QPN_WIDTH-1:QP_AW], cfg_qpn[QPN_WIDTH-1:QP_AW],
                    rd_sge_qpn[QPN_WIDTH-1:QP_AW], c_access[7:4], c_access[0], c_rnr[7:5],
                    c_rqlsize[7:5], c_rqlstride[7:5], rw_beats[16:8], bl_beats[13:9],
                    win_sh[2*DATA_WIDTH-1:DATA_WIDTH], rd_arsize, rd_arburst};
    /* verilator lint_on UNUSEDSIGNAL */

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXI_RD_MASTER_NOID("roce_resp DMA", ADDR_WIDTH, DATA_WIDTH)

endmodule
`default_nettype wire
