`default_nettype none
`include "nic_common.vh"
// nic_cmd: the command processor of the nsnic device: the hardware side of the mailbox
// (nicsim.hwif CmdOpcode / CmdStatus), with the QP and CQ context tables.
//
// On cmd_go (ignored while busy) it latches CMD_OPCODE/IN/OUT/MOD, reads the input block from
// host memory (AXI4 read master), executes, writes the output block (AXI4 write master) and
// completes with a hwif.CmdStatus, giving the status nicsim/nic/command.py gives for the same
// input and the same tables:
//
//   QUERY_DEVICE    output hwif.DeviceCaps (56 bytes) from the parameters (max_qp NUM_QP, max_cq
//                   NUM_CQ, max_mpt MPT_DEPTH, max_mtt MTT_DEPTH, MAX_QP_WR, MAX_SGE, MAX_CQE,
//                   MAX_QP_RD_ATOM, MAX_INLINE, MAX_UAR) and what the device lacks: max_eq 0
//                   (no event queues), max_srq 0 (no SRQs), flags 0 (no DevCap.ODP), so the
//                   driver issues none of their commands (hwif.device_commands)
//   QUERY_PORT      CMD_MOD = port: BAD_PARAM unless 1; output hwif.PortInfo: ACTIVE, LINK_UP,
//                   max_mtu MTU_4096, port_speed_mbps while port_up; else DOWN, POLLING,
//                   MTU_4096, 0 (what nicsim/nic/command.py reports for a port with / without
//                   a link)
//   INIT_HCA        hwif.HcaInit: EXCEED_LIM if log_mpt_entries > log2(MPT_DEPTH) or
//                   log_mtt_entries > log2(MTT_DEPTH); else the MPT/MTT index ranges become
//                   2**log (before any INIT_HCA they are empty). The table base addresses are
//                   not used: the tables are on chip (mr_translate).
//   WRITE_MPT       EXCEED_LIM unless CMD_MOD < MPT entries; the 32 bytes of hwif.Mpt the
//                   driver writes (Mpt.sw_part) go to mr_translate's command port
//   INVALIDATE_MPT  EXCEED_LIM unless CMD_MOD < MPT entries; mr_translate INVALIDATE_MPT; fenced
//   WRITE_MTT       input: count u32, pad u32, count x u64. EXCEED_LIM if CMD_MOD + count >
//                   MTT entries (checked on the first 8 bytes, before the rest is read); else
//                   each address goes to mr_translate (WRITE_MTT at index CMD_MOD + i) as it
//                   streams in
//   CREATE_CQ       hwif.Cqc (its state byte is ignored): BAD_PARAM if cqn >= NUM_CQ, the CQ
//                   exists, or uar not in 1..MAX_UAR; EXCEED_LIM if 2**log_size > MAX_CQE;
//                   else the CQ context
//                   (log_size, base, dbrec, eqn, uar, refs = 0) is written, cqe_write is
//                   configured (enable) and the CQ is bound to its UAR in the BAR
//   DESTROY_CQ      CMD_MOD = cqn: BAD_RESOURCE if no such CQ; BUSY if a QP uses it (refs);
//                   else cqe_write disables it, the binding is cleared; fenced
//   QUERY_CQ        CMD_MOD = cqn: BAD_RESOURCE if no such CQ; output the hwif.Cqc as created
//                   (or resized), state = hwif.CqState OVERRUN once cq_overrun_valid named the
//                   CQ, else OK
//   RESIZE_CQ       CMD_MOD = cqn; input hwif.Cqc (base, log_size used): BAD_RESOURCE if no
//                   such CQ; EXCEED_LIM if 2**log_size > MAX_CQE. Else cqe_write is held (it
//                   takes no completion; those accepted before are awaited to their B
//                   response), the consumer index is read from the CQ's doorbell record (u32)
//                   and n = producer index - it (mod 2**32); BAD_PARAM if n > 2**log_size
//                   (nothing changes). Else the new ring is written whole, 4 CQEs (128 bytes)
//                   per burst: entry k < n is the old ring's entry (ci + k) mod old size with
//                   its owner byte 1 (hwif.cqe_owner(k, log_size)), the others zero; then the
//                   doorbell record gets 0 (4 bytes), cqe_write continues in the new ring at
//                   index n, the CQ table takes the new base and log_size, the hold ends;
//                   fenced. Exactly nicsim/nic/cq.py CqWriter.resize. An AXI error while
//                   moving: BAD_PARAM, the CQ stays on its old ring.
//   CREATE_QP       hwif.Qpc: BAD_PARAM if qpn is 0 or >= NUM_QP, the QP exists, or uar not in
//                   1..MAX_UAR; BAD_PARAM if type is not RC/UC/UD; BAD_RESOURCE if the send or
//                   receive CQ does not exist; else both CQs' refs are incremented (twice for
//                   one CQ used both ways), the QP context is written (RESET and the model's
//                   defaults: path_mtu 1024, timeout 14, retry 7, rnr_retry 7,
//                   max_rd_atomic 1, max_dest_rd_atomic 1, traffic class 64 << 8, pkey 0xffff)
//                   and the QP bound to its UAR; wqe_fetch gets its SQ ring (disabled)
//                   (the input's other fields are ignored, as the model ignores them)
//   MODIFY_QP       hwif.Qpc: BAD_RESOURCE if no such QP. The new state is the input's state
//                   if attr_mask has STATE, else the current one. RESET: the QP goes to RESET
//                   (fields kept, wqe_fetch disabled); ERR: the QP goes to ERR; otherwise the
//                   (old, new) pair must be one of command.py's _LEGAL transitions (else
//                   BAD_STATE) and the fields named by attr_mask are applied exactly as
//                   command.py _apply does (ACCESS_FLAGS, PATH_MTU, DEST_QPN, RQ_PSN and
//                   SQ_PSN masked to 24 bits, TIMEOUT, RETRY_CNT, RNR_RETRY, MIN_RNR_TIMER,
//                   MAX_QP_RD_ATOMIC, MAX_DEST_RD_ATOMIC, QKEY, AV = dmac, smac, sgid, dgid,
//                   traffic_class, sgid_index). RTR -> RTS enables the SQ in wqe_fetch at index 0.
//                   A state byte > 6 (ERR), or an AV whose sgid_index is not in the port's
//                   two-entry GID table, gives BAD_PARAM (the model raises on both).
//   QUERY_QP        CMD_MOD = qpn: BAD_RESOURCE if no such QP; output the hwif.Qpc the model's
//                   _qpc_of returns (attr_mask 0, pkey 0xffff)
//   DESTROY_QP      CMD_MOD = qpn: BAD_RESOURCE if no such QP; else unbound, wqe_fetch
//                   disables it, the refs of its CQs (those that exist) are decremented; fenced
//   other opcodes   BAD_OPCODE (nothing is read): the event-queue, SRQ, ODP and multicast
//                   commands among them, which DeviceCaps / FEATURES say the device lacks
// Fenced commands complete only when dma_idle is high after their own work: the NIC's earlier
// DMA writes have all been answered (the model's pcie.writes_landed_by()). Failed commands
// write no output and wait for no fence.
//
// Context tables (direct-mapped: QP/CQ number n is entry n; which exist is in flops):
//   QP table  the 128-byte hwif.Qpc image of each QP, exactly as QUERY_QP returns it, as 16
//             little-endian 64-bit words in a RAM (QP q's word w at q * 16 + w; one read and
//             one write port). CREATE_QP writes the 16 words, MODIFY_QP reads word 0 (state),
//             then rewrites each word merging the bytes attr_mask names, QUERY_QP and
//             DESTROY_QP copy the words out: one word per cycle.
//   CQ table  {refs, uar, eqn, dbrec, base, log_size} per CQ in a RAM; refs is the number
//             of QP references (send and receive CQ each count).
// Input records are gathered in a 16-word register (rec) from which the checks read their
// fields; outputs are written from rec (QUERY_QP), the CQ table (QUERY_CQ) or constants
// (QUERY_DEVICE).
// Not in the model: an AXI error response (RRESP/BRESP not OKAY) while reading the input or
// writing the output completes the command with BAD_PARAM (MTT entries streamed before the
// error stay written; proposal: a DMA_ERROR status in hwif).
//
// The DMA engines are word-serial (64 bits per cycle; commands are rare): CMD_IN and CMD_OUT
// may have any byte alignment. Reads and writes are INCR bursts of full-width beats that never
// cross a 4 KiB boundary (at most 256 beats), one burst at a time; writes use byte strobes,
// and an unaligned input block is read as whole 8-byte words (up to 7 bytes beyond it on each
// side). ARID/AWID are 0; every write's B response is awaited before the command completes.
//
// Timing: busy rises the cycle after cmd_go. A command costs a few cycles of decode, its input
// read (AXI latency per burst plus a cycle per beat and per 8 bytes), 17-20 cycles per QP
// table pass (CREATE/MODIFY/QUERY/DESTROY_QP), 3 per CQ reference update, its output write
// (a cycle per 8 bytes and per beat, plus the B latency) and, when fenced, the wait for
// dma_idle. WRITE_MTT streams one entry per cycle into mr_translate. RESIZE_CQ costs the drain
// of cqe_write, the doorbell-record read, a 32-byte read per moved CQE and a 128-byte write
// (and its B) per 4 entries of the new ring, so a 4096-entry ring takes some 1024 write
// round trips; completions for every CQ wait meanwhile (the hold is on all of cqe_write).
//
// Parameters:
//   AXI_DATA_WIDTH  AXI data width (64..1024, a power of two)
//   AXI_ADDR_WIDTH  AXI address width (<= 64)
//   AXI_ID_WIDTH    AXI ID width
//   NUM_QP, NUM_CQ  QP / CQ contexts (>= 2, powers of two; QPN 0 is never created, as in the
//                   model); QUERY_DEVICE reports them as max_qp / max_cq
//   QPN_WIDTH, CQN_WIDTH   widths of the QP / CQ numbers on the config ports
//   MPT_DEPTH, MTT_DEPTH   mr_translate's table depths (powers of two: INIT_HCA sizes are
//                   powers of two, and max_mpt / max_mtt report them)
//   MAX_UAR, MAX_QP_WR, MAX_SGE, MAX_CQE, MAX_QP_RD_ATOM, MAX_INLINE   reported capacities
//
// Ports:
//   clk, rst                 clock, synchronous active-high reset (no QP, no CQ, MPT/MTT
//                            ranges empty until INIT_HCA)
//   cmd_go, cmd_opcode, cmd_in, cmd_out, cmd_mod   the mailbox (nic_bar)
//   busy, status[7:0]        CMD_STATUS
//   m_axi_ar*, m_axi_r*      AXI4 read master (input blocks)
//   m_axi_aw*, m_axi_w*, m_axi_b*  AXI4 write master (output blocks)
//   mr_cmd_*                 mr_translate's command port
//   wq_cfg_*                 wqe_fetch's cfg port (single-cycle pulses)
//   cq_cfg_*                 cqe_write's cfg port (single-cycle pulses)
//   cq_hold, cq_busy, cq_pi  cqe_write held (RESIZE_CQ), its writes not yet acknowledged, its
//                            producer indexes (CQ c at bits 32c+31:32c)
//   bind_valid, bind_cq, bind_num, bind_uar   nic_bar's binding port (bind_uar 0: unbind)
//   dma_idle                 no DMA write of the NIC in flight (fence)
//   port_up, port_speed_mbps the Ethernet port's link state and rate (QUERY_PORT)
//   dp_ctx_qpn, dp_ctx_word, dp_ctx_data   the datapath's read port on the QP table: word
//                            dp_ctx_word of QP dp_ctx_qpn's Qpc image, one cycle later (a
//                            second read port of the same RAM; commands see no difference)
//   dp_err_valid, dp_err_ready, dp_err_qpn   the datapath (completer) sets a QP's state to
//                            ERR in the table (a read-modify-write of word 0 between commands;
//                            a QP in RESET or destroyed is left alone; a GO that comes
//                            meanwhile is held and runs next)
//   dp2_ctx_qpn, dp2_ctx_word, dp2_ctx_data   a third read port (the responder)
//   rq_psn_set_valid, rq_psn_set_qpn   as sq_psn_set_* for rq_psn (the responder's expected
//                            PSN)
//   sq_psn_set_valid, sq_psn_set_qpn   a pulse when a command set the QP's sq_psn in the table
//                            (CREATE_QP: 0; MODIFY_QP with SQ_PSN in attr_mask): the
//                            requester, which keeps the running PSN, reloads it from word 6
//   cq_overrun_valid, cq_overrun_cqn   a CQ overran (the CQE writer found it full): its
//                            QUERY_CQ state becomes OVERRUN until it is destroyed
//   cnt_cmds, cnt_errors     commands run, commands completed with a status other than OK
module nic_cmd #(
    parameter AXI_DATA_WIDTH = 64,
    parameter AXI_ADDR_WIDTH = 64,
    parameter AXI_ID_WIDTH = 4,
    parameter NUM_QP = 64,
    parameter NUM_CQ = 64,
    parameter QPN_WIDTH = 24,
    parameter CQN_WIDTH = 24,
    parameter MPT_DEPTH = 256,
    parameter MTT_DEPTH = 1024,
    parameter MAX_UAR = 1024,
    parameter MAX_QP_WR = 32768,
    parameter MAX_SGE = 16,
    parameter MAX_CQE = 1048576,
    parameter MAX_QP_RD_ATOM = 16,
    parameter MAX_INLINE = 256
) (
    input  wire                          clk,
    input  wire                          rst,

    input  wire                          cmd_go,
    input  wire [63:0]                   cmd_opcode,
    input  wire [63:0]                   cmd_in,
    input  wire [63:0]                   cmd_out,
    input  wire [63:0]                   cmd_mod,
    output reg                           busy,
    output reg  [7:0]                    status,

    `NIC_AXI_RD_MASTER_PORTS(AXI_ID_WIDTH, AXI_ADDR_WIDTH, AXI_DATA_WIDTH),

    `NIC_AXI_WR_MASTER_PORTS(AXI_ID_WIDTH, AXI_ADDR_WIDTH, AXI_DATA_WIDTH),

    output reg                           mr_cmd_valid,
    input  wire                          mr_cmd_ready,
    output reg  [1:0]                    mr_cmd_op,
    output reg  [31:0]                   mr_cmd_index,
    output reg  [255:0]                  mr_cmd_data,

    output reg                           wq_cfg_valid,
    output reg  [QPN_WIDTH-1:0]          wq_cfg_qpn,
    output reg                           wq_cfg_enable,
    output reg  [AXI_ADDR_WIDTH-1:0]     wq_cfg_base,
    output reg  [4:0]                    wq_cfg_log_size,
    output reg  [3:0]                    wq_cfg_log_stride,
    output reg  [15:0]                   wq_cfg_index,

    output reg                           cq_cfg_valid,
    output reg  [CQN_WIDTH-1:0]          cq_cfg_cqn,
    output reg                           cq_cfg_enable,
    output reg  [AXI_ADDR_WIDTH-1:0]     cq_cfg_base,
    output reg  [4:0]                    cq_cfg_log_size,
    output reg  [31:0]                   cq_cfg_index,
    output reg                           cq_hold,
    input  wire                          cq_busy,
    input  wire [NUM_CQ*32-1:0]          cq_pi,

    output reg                           bind_valid,
    output reg                           bind_cq,
    output reg  [31:0]                   bind_num,
    output reg  [15:0]                   bind_uar,

    input  wire                          dma_idle,
    input  wire                          port_up,
    input  wire [31:0]                   port_speed_mbps,
    input  wire                          dp_err_valid,
    output wire                          dp_err_ready,
    input  wire [QPN_WIDTH-1:0]          dp_err_qpn,
    input  wire [QPN_WIDTH-1:0]          dp_ctx_qpn,
    input  wire [3:0]                    dp_ctx_word,
    output reg  [63:0]                   dp_ctx_data,
    input  wire [QPN_WIDTH-1:0]          dp2_ctx_qpn,
    input  wire [3:0]                    dp2_ctx_word,
    output reg  [63:0]                   dp2_ctx_data,
    output reg                           sq_psn_set_valid,
    output reg  [QPN_WIDTH-1:0]          sq_psn_set_qpn,
    output reg                           rq_psn_set_valid,
    output reg  [QPN_WIDTH-1:0]          rq_psn_set_qpn,
    input  wire                          cq_overrun_valid,
    input  wire [CQN_WIDTH-1:0]          cq_overrun_cqn,

    output reg  [31:0]                   cnt_cmds,
    output reg  [31:0]                   cnt_errors
);

    `NIC_CLOG2_FUNCTION

    // ---------------------------------------------------------------- constants
    localparam BEAT_BYTES = AXI_DATA_WIDTH / 8;
    localparam BEAT_LOG = clog2(BEAT_BYTES);
    localparam LANES = BEAT_BYTES / 8;                 // 64-bit words per beat
    localparam LANE_LOG = clog2(LANES);
    localparam LANE_W = LANES > 1 ? LANE_LOG : 1;
    localparam STRB_W = AXI_DATA_WIDTH / 8;
    localparam integer LAST_LANE_I = LANES - 1;
    localparam [LANE_W-1:0] LAST_LANE = LAST_LANE_I[LANE_W-1:0];
    localparam integer MAX_BURST_WORDS_I = 256 * LANES;
    localparam [15:0] MAX_BURST_WORDS = MAX_BURST_WORDS_I[15:0];

    localparam QP_AW = clog2(NUM_QP);
    localparam CQ_AW = clog2(NUM_CQ);
    localparam LOG_MPT = clog2(MPT_DEPTH);
    localparam LOG_MTT = clog2(MTT_DEPTH);
    localparam UAR_W = clog2(MAX_UAR + 1);
    localparam REF_W = clog2(2 * NUM_QP + 1);

    // hwif.DeviceCaps
    localparam [31:0] CAP_MAX_QP = NUM_QP;
    localparam [31:0] CAP_MAX_CQ = NUM_CQ;
    localparam [31:0] CAP_MAX_MPT = MPT_DEPTH;
    localparam [31:0] CAP_MAX_MTT = MTT_DEPTH;
    localparam [31:0] CAP_MAX_QP_WR = MAX_QP_WR;
    localparam [31:0] CAP_MAX_SGE = MAX_SGE;
    localparam [31:0] CAP_MAX_CQE = MAX_CQE;
    localparam [31:0] CAP_MAX_QP_RD_ATOM = MAX_QP_RD_ATOM;
    localparam [31:0] CAP_MAX_INLINE = MAX_INLINE;
    localparam [31:0] CAP_MAX_UAR = MAX_UAR;

    localparam QW_AW = QP_AW + 4;                      // QP table: 16 64-bit words per QP
    localparam CQE_W = 8 + 64 + 64 + 32 + UAR_W + REF_W;   // CQ entry

    // hwif.CmdStatus
    localparam [7:0] ST_OK = 8'h00;
    localparam [7:0] ST_BAD_OPCODE = 8'h01;
    localparam [7:0] ST_BAD_PARAM = 8'h02;
    localparam [7:0] ST_BAD_RESOURCE = 8'h03;
    localparam [7:0] ST_BAD_STATE = 8'h04;
    localparam [7:0] ST_BUSY = 8'h05;
    localparam [7:0] ST_EXCEED_LIM = 8'h06;

    // hwif.CmdOpcode, as an internal code
    localparam [3:0] OP_QUERY_DEVICE = 4'd0;
    localparam [3:0] OP_INIT_HCA = 4'd1;
    localparam [3:0] OP_CREATE_CQ = 4'd2;
    localparam [3:0] OP_DESTROY_CQ = 4'd3;
    localparam [3:0] OP_CREATE_QP = 4'd4;
    localparam [3:0] OP_MODIFY_QP = 4'd5;
    localparam [3:0] OP_QUERY_QP = 4'd6;
    localparam [3:0] OP_DESTROY_QP = 4'd7;
    localparam [3:0] OP_WRITE_MPT = 4'd8;
    localparam [3:0] OP_INVALIDATE_MPT = 4'd9;
    localparam [3:0] OP_WRITE_MTT = 4'd10;
    localparam [3:0] OP_QUERY_CQ = 4'd11;
    localparam [3:0] OP_QUERY_PORT = 4'd12;
    localparam [3:0] OP_DP_ERR = 4'd13;       // internal: the datapath sets a QP to ERR
    localparam [3:0] OP_RESIZE_CQ = 4'd14;
    localparam [3:0] OP_BAD = 4'd15;

    // hwif.QpState
    localparam [7:0] QPS_RESET = 8'd0;
    localparam [7:0] QPS_INIT = 8'd1;
    localparam [7:0] QPS_RTR = 8'd2;
    localparam [7:0] QPS_RTS = 8'd3;
    localparam [7:0] QPS_SQD = 8'd4;
    localparam [7:0] QPS_SQE = 8'd5;
    localparam [7:0] QPS_ERR = 8'd6;

    // mr_translate command opcodes
    localparam [1:0] MR_WRITE_MPT = 2'd0;
    localparam [1:0] MR_WRITE_MTT = 2'd1;
    localparam [1:0] MR_INVALIDATE_MPT = 2'd2;

    // FSM states
    localparam [4:0] S_IDLE = 5'd0;
    localparam [4:0] S_DECODE = 5'd1;
    localparam [4:0] S_RD = 5'd2;
    localparam [4:0] S_EXEC = 5'd3;
    localparam [4:0] S_QP_RD = 5'd4;
    localparam [4:0] S_QP_OP = 5'd5;
    localparam [4:0] S_CQ_RD = 5'd6;
    localparam [4:0] S_CQ_OP = 5'd7;
    localparam [4:0] S_REF0 = 5'd8;
    localparam [4:0] S_REF1 = 5'd9;
    localparam [4:0] S_CQP_WRITE = 5'd10;
    localparam [4:0] S_CCQ_WRITE = 5'd11;
    localparam [4:0] S_MTT = 5'd12;
    localparam [4:0] S_MR = 5'd13;
    localparam [4:0] S_WR = 5'd14;
    localparam [4:0] S_FENCE = 5'd15;
    localparam [4:0] S_DONE = 5'd16;
    localparam [4:0] S_QP_MOD = 5'd17;
    localparam [4:0] S_QP_COPY = 5'd18;
    localparam [4:0] S_RZ_HOLD = 5'd19;    // RESIZE_CQ: cqe_write held, the CQ entry read
    localparam [4:0] S_RZ_DRAIN = 5'd20;   // ... its accepted CQEs acknowledged
    localparam [4:0] S_RZ_CI = 5'd21;      // ... the doorbell record read
    localparam [4:0] S_RZ_CHK = 5'd22;     // ... do the unpolled CQEs fit
    localparam [4:0] S_RZ_CHUNK = 5'd23;   // ... 4 entries of the new ring assembled in rec
    localparam [4:0] S_RZ_NEXT = 5'd24;
    localparam [4:0] S_RZ_RD = 5'd25;      // ... one old CQE read into rec
    localparam [4:0] S_RZ_WR = 5'd26;      // ... the 4 entries written
    localparam [4:0] S_RZ_DB = 5'd27;      // ... the doorbell record zeroed

    // ---------------------------------------------------------------- registers
    reg [4:0]   state;
    reg         go_latch;    // a GO came while the datapath used the QP table
    reg [3:0]   op;
    reg [63:0]  r_in;
    reg [63:0]  r_out;
    reg [63:0]  r_mod;
    reg [7:0]   st;          // status to report
    reg         fenced;
    reg [1023:0] rec;        // input record / output record, little-endian

    reg [LOG_MPT:0] mpt_entries;   // MPT / MTT index ranges (0 before INIT_HCA)
    reg [LOG_MTT:0] mtt_entries;

    reg [NUM_QP-1:0] qp_valid;
    reg [NUM_CQ-1:0] cq_valid;
    reg [NUM_CQ-1:0] cq_overrun;
    reg [QP_AW-1:0]  qp_sel;
    reg [CQ_AW-1:0]  cq_sel;

    reg         ref_inc;     // CREATE_QP: +1, DESTROY_QP: -1
    reg         ref_step;    // 0: send CQ, 1: receive CQ
    reg [31:0]  ref_cqn0;
    reg [31:0]  ref_cqn1;

    reg [31:0]  mtt_idx;

    reg [4:0]   qw;          // word of the QP-table loops (CREATE, MODIFY, QUERY, DESTROY)
    reg [7:0]   old_st;      // MODIFY_QP: the state before and after
    reg [7:0]   new_st;
    reg [63:0]  sq_base;     // MODIFY_QP: the SQ ring, for wqe_fetch at RTR -> RTS
    reg [7:0]   sq_lsize;
    reg [7:0]   sq_lstride;
    // RESIZE_CQ: the new ring, the old one, the doorbell record, the counts and the chunk
    reg [63:0]  rz_base;
    reg [7:0]   rz_log;
    reg [63:0]  rz_obase;
    reg [4:0]   rz_olog;
    reg [63:0]  rz_dbrec;
    reg [31:0]  rz_pi;
    reg [31:0]  rz_ci;
    reg [31:0]  rz_n;
    reg [31:0]  rz_k;          // first new-ring entry of the chunk in rec
    reg [2:0]   rz_j;          // entry of the chunk being read
    reg         rz_err;        // an AXI error while moving

    // read engine control (pulse) and write engine control (pulse)
    reg         rd_go;
    reg [63:0]  rd_go_addr;
    reg [31:0]  rd_go_words;
    reg         wr_go;
    reg [63:0]  wr_go_addr;
    reg [4:0]   wr_go_words;
    reg [7:0]   wr_go_strb;    // byte strobe of the last record word (8'hff: all of it)
    reg [3:0]   rd_go_widx;    // record word the read's first word goes to

    // ---------------------------------------------------------------- context RAMs
    // QP table: the 128-byte hwif.Qpc image of QP q as 16 little-endian 64-bit words at
    // q * 16 + w (one read port, one write port, both on the QP in qp_sel)
    reg [63:0]      qram [0:NUM_QP*16-1];
    reg [63:0]      qram_q;
    reg [3:0]       qram_rw;     // word the read port reads (registered address)
    reg             qram_we;
    reg [3:0]       qram_ww;
    reg [63:0]      qram_wd;
    reg [CQE_W-1:0] cqt_mem [0:NUM_CQ-1];
    reg [CQE_W-1:0] cqt_q;
    reg             cqt_we;
    reg [CQE_W-1:0] cqt_wd;

    wire [QW_AW-1:0] qram_ra = {qp_sel, qram_rw};
    wire [QW_AW-1:0] qram_wa = {qp_sel, qram_ww};
    always @(posedge clk) begin
        if (qram_we)
            qram[qram_wa] <= qram_wd;
        qram_q <= qram[qram_ra];
    end

    // the datapath's read port (a second read port of the QP table)
    wire [QW_AW-1:0] dp_ra = {dp_ctx_qpn[QP_AW-1:0], dp_ctx_word};
    always @(posedge clk)
        dp_ctx_data <= qram[dp_ra];
    // and a third one (the responder)
    wire [QW_AW-1:0] dp2_ra = {dp2_ctx_qpn[QP_AW-1:0], dp2_ctx_word};
    always @(posedge clk)
        dp2_ctx_data <= qram[dp2_ra];

    always @(posedge clk) begin
        if (cqt_we)
            cqt_mem[cq_sel] <= cqt_wd;
        cqt_q <= cqt_mem[cq_sel];
    end

    /* verilator lint_off WIDTHEXPAND */
    wire [QPN_WIDTH-1:0] sel_qpn = qp_sel;   // zero-extended
    wire [CQN_WIDTH-1:0] sel_cqn = cq_sel;
    /* verilator lint_on WIDTHEXPAND */

    // CQ entry fields
    wire [REF_W-1:0] cq_refs = cqt_q[CQE_W-1 -: REF_W];

    // ---------------------------------------------------------------- decode of the input
    wire [3:0] go_op =
        cmd_opcode == 64'h01 ? OP_QUERY_DEVICE :
        cmd_opcode == 64'h02 ? OP_INIT_HCA :
        cmd_opcode == 64'h03 ? OP_QUERY_PORT :
        cmd_opcode == 64'h10 ? OP_CREATE_CQ :
        cmd_opcode == 64'h11 ? OP_DESTROY_CQ :
        cmd_opcode == 64'h12 ? OP_QUERY_CQ :
        cmd_opcode == 64'h13 ? OP_RESIZE_CQ :
        cmd_opcode == 64'h20 ? OP_CREATE_QP :
        cmd_opcode == 64'h21 ? OP_MODIFY_QP :
        cmd_opcode == 64'h22 ? OP_QUERY_QP :
        cmd_opcode == 64'h23 ? OP_DESTROY_QP :
        cmd_opcode == 64'h30 ? OP_WRITE_MPT :
        cmd_opcode == 64'h31 ? OP_INVALIDATE_MPT :
        cmd_opcode == 64'h32 ? OP_WRITE_MTT : OP_BAD;

    // input record sizes in 8-byte words (hwif record sizes / 8); WRITE_MTT: its header
    wire [31:0] in_words =
        op == OP_INIT_HCA ? 32'd3 :
        op == OP_CREATE_CQ ? 32'd4 :
        op == OP_RESIZE_CQ ? 32'd4 :
        op == OP_CREATE_QP ? 32'd16 :
        op == OP_MODIFY_QP ? 32'd16 :
        op == OP_WRITE_MPT ? 32'd4 :
        op == OP_WRITE_MTT ? 32'd1 : 32'd0;

    // records (byte offsets from hwif)
    // HcaInit
    wire [31:0] hca_in_log_mpt = rec[8*16 +: 32];
    wire [31:0] hca_in_log_mtt = rec[8*20 +: 32];
    // Cqc
    wire [31:0] cqc_cqn = rec[8*0 +: 32];
    wire [7:0]  cqc_log_size = rec[8*4 +: 8];
    wire [63:0] cqc_base = rec[8*8 +: 64];
    wire [63:0] cqc_dbrec = rec[8*16 +: 64];
    wire [31:0] cqc_eqn = rec[8*24 +: 32];
    wire [31:0] cqc_uar = rec[8*28 +: 32];
    // Qpc
    wire [31:0] qpc_qpn = rec[8*0 +: 32];
    wire [7:0]  qpc_state = rec[8*4 +: 8];
    wire [7:0]  qpc_type = rec[8*5 +: 8];
    wire [31:0] qpc_send_cqn = rec[8*12 +: 32];
    wire [31:0] qpc_recv_cqn = rec[8*16 +: 32];
    wire [31:0] qpc_attr_mask = rec[8*60 +: 32];
    wire [7:0]  qpc_sgid_index = rec[8*120 +: 8];
    // The port's GID table (hwif.gid_table) of a RoCE v2-only device: the link-local entry and
    // the IPv4-mapped one. The driver writes the chosen entry's GID into sgid, which is what
    // the datapath frames from, so the index is only checked and kept for QUERY_QP.
    localparam [7:0] GID_COUNT = 8'd2;
    wire bad_sgid = qpc_attr_mask[7] && qpc_sgid_index >= GID_COUNT;
    wire [31:0] qpc_uar = rec[8*116 +: 32];
    // WRITE_MTT header
    wire [31:0] mtt_count = rec[31:0];

    wire [QP_AW-1:0] mod_qp = r_mod[QP_AW-1:0];
    wire [CQ_AW-1:0] mod_cq = r_mod[CQ_AW-1:0];
    localparam [63:0] NUM_QP64 = {32'd0, NUM_QP[31:0]};
    localparam [63:0] NUM_CQ64 = {32'd0, NUM_CQ[31:0]};
    wire mod_qp_ok = r_mod < NUM_QP64 && qp_valid[mod_qp];
    wire mod_cq_ok = r_mod < NUM_CQ64 && cq_valid[mod_cq];
    /* verilator lint_off WIDTHEXPAND */
    wire [31:0] cq_overrun_cqn32 = cq_overrun_cqn;   // zero-extended
    /* verilator lint_on WIDTHEXPAND */
    wire cq_overrun_cqn_ok = cq_overrun_cqn32 < NUM_CQ;
    // MPT / MTT index ranges set by INIT_HCA (empty before it)
    wire mpt_index_ok = r_mod[63:LOG_MPT+1] == {(63-LOG_MPT){1'b0}} &&
                        r_mod[LOG_MPT:0] < mpt_entries;
    wire [64:0] mtt_end = {1'b0, r_mod} + {33'd0, mtt_count};
    wire mtt_range_ok = mtt_end[64:LOG_MTT+1] == {(64-LOG_MTT){1'b0}} &&
                        mtt_end[LOG_MTT:0] <= mtt_entries;

    // CREATE_CQ checks
    wire ccq_bad = cqc_cqn >= NUM_CQ || cq_valid[cqc_cqn[CQ_AW-1:0]] || cqc_uar == 32'd0 ||
                   cqc_uar > MAX_UAR;
    wire ccq_big = cqc_log_size >= 8'd32 || (33'd1 << cqc_log_size[4:0]) > MAX_CQE;
    // CREATE_QP checks
    wire cqp_bad = qpc_qpn == 32'd0 || qpc_qpn >= NUM_QP || qp_valid[qpc_qpn[QP_AW-1:0]] ||
                   qpc_uar == 32'd0 || qpc_uar > MAX_UAR;
    wire cqp_bad_type = qpc_type != 8'd2 && qpc_type != 8'd3 && qpc_type != 8'd4;
    wire cqp_no_cq = qpc_send_cqn >= NUM_CQ || !cq_valid[qpc_send_cqn[CQ_AW-1:0]] ||
                     qpc_recv_cqn >= NUM_CQ || !cq_valid[qpc_recv_cqn[CQ_AW-1:0]];
    // MODIFY_QP target
    wire mqp_ok = qpc_qpn < NUM_QP && qp_valid[qpc_qpn[QP_AW-1:0]];

    // ---------------------------------------------------------------- QP-table words
    // record word qw (a decoded mux)
    wire [63:0] rec_w = rec[64*qw[3:0] +: 64];

    // CREATE_QP: word qw of the new QP's Qpc: qpn, type, pd, CQs, rings and uar from the
    // input; the model's QpCtx defaults elsewhere (RESET, path MTU 1024, timeout 14, retry 7,
    // rnr_retry 7, pkey 0xffff, max_rd_atomic 1, max_dest_rd_atomic 1, traffic class 64 << 8)
    reg  [63:0] init_w;
    always @* begin
        case (qw[3:0])
            4'd0: init_w = {8'd0, 8'd3, rec_w[47:40], 8'd0, rec_w[31:0]};
            4'd1, 4'd2, 4'd3, 4'd4: init_w = rec_w;    // pd .. rq_log_stride
            4'd5: init_w = {32'd0, 8'd0, 8'd7, 8'd7, 8'd14};
            4'd13: init_w = {8'd1, 8'd1, 16'hffff, 32'd0};
            4'd14: init_w = {rec_w[63:32], 32'h4000};
            default: init_w = 64'd0;
        endcase
    end

    // MODIFY_QP: the state change (word 0 in qram_q in S_QP_OP)
    wire [7:0] cur_state = qram_q[39:32];
    wire [7:0] want_state = qpc_attr_mask[0] ? qpc_state : cur_state;
    wire legal =
        (cur_state == QPS_RESET && want_state == QPS_INIT) ||
        (cur_state == QPS_INIT && want_state == QPS_INIT) ||
        (cur_state == QPS_INIT && want_state == QPS_RTR) ||
        (cur_state == QPS_RTR && want_state == QPS_RTS) ||
        (cur_state == QPS_RTS && want_state == QPS_RTS) ||
        (cur_state == QPS_RTS && want_state == QPS_SQD) ||
        (cur_state == QPS_SQD && want_state == QPS_SQD) ||
        (cur_state == QPS_SQD && want_state == QPS_RTS) ||
        (cur_state == QPS_SQE && want_state == QPS_RTS);
    wire to_reset_err = want_state == QPS_RESET || want_state == QPS_ERR;

    // bytes of the Qpc each attr_mask bit applies (hwif.QpAttrMask; command.py _apply)
    reg [127:0] be;
    always @* begin
        be = 128'd0;
        if (qpc_attr_mask[3]) be[7] = 1'b1;                       // ACCESS_FLAGS
        if (qpc_attr_mask[6]) be[59:56] = 4'hf;                   // QKEY
        if (qpc_attr_mask[7]) begin                               // AV
            be[107:64] = {44{1'b1}};                              // dmac smac sgid dgid
            be[115:112] = 4'hf;                                   // traffic_class
            be[120] = 1'b1;                                       // sgid_index
        end
        if (qpc_attr_mask[8]) be[6] = 1'b1;                       // PATH_MTU
        if (qpc_attr_mask[9]) be[40] = 1'b1;                      // TIMEOUT
        if (qpc_attr_mask[10]) be[41] = 1'b1;                     // RETRY_CNT
        if (qpc_attr_mask[11]) be[42] = 1'b1;                     // RNR_RETRY
        if (qpc_attr_mask[12]) be[55:52] = 4'hf;                  // RQ_PSN
        if (qpc_attr_mask[13]) be[110] = 1'b1;                    // MAX_QP_RD_ATOMIC
        if (qpc_attr_mask[15]) be[43] = 1'b1;                     // MIN_RNR_TIMER
        if (qpc_attr_mask[16]) be[51:48] = 4'hf;                  // SQ_PSN
        if (qpc_attr_mask[17]) be[111] = 1'b1;                    // MAX_DEST_RD_ATOMIC
        if (qpc_attr_mask[20]) be[47:44] = 4'hf;                  // DEST_QPN
    end

    // word qw of the modified Qpc: the old word (qram_q) with the applied bytes of the input
    wire [7:0] be_w = be[8*qw[3:0] +: 8];
    reg [63:0] src_w;
    reg [63:0] mod_w;
    integer bk;
    always @* begin
        src_w = rec_w;
        if (qw[3:0] == 4'd6) begin                                // PSNs are 24 bits
            src_w[31:24] = 8'd0;
            src_w[63:56] = 8'd0;
        end
        for (bk = 0; bk < 8; bk = bk + 1)
            mod_w[8*bk +: 8] = be_w[bk] ? src_w[8*bk +: 8] : qram_q[8*bk +: 8];
        if (qw[3:0] == 4'd0)
            mod_w[39:32] = new_st;
    end

    // ================================================================ read engine
    // Reads rd_go_words 8-byte words from byte address rd_go_addr and hands them out one per
    // cycle on (w_fire, w_data) while g_ready allows.
    reg         rd_active;
    reg [2:0]   rd_s;          // byte offset of the block in its 8-byte word
    reg         rd_first;      // unaligned: the first grid word only primes the realigner
    reg [31:0]  rd_g_left;     // grid words still to hand out
    reg [63:0]  rd_req_addr;   // next grid word address to request
    reg [31:0]  rd_req_left;   // grid words not yet requested
    reg         ar_v;
    reg [63:0]  ar_addr;
    reg [7:0]   ar_len;
    reg         rburst;        // a burst is requested and not fully handed out
    reg [15:0]  rb_left;       // its words not yet handed out
    reg [LANE_W-1:0] rb_lane;  // lane of the next word in the held beat
    reg         beat_v;
    reg [AXI_DATA_WIDTH-1:0] beat;
    reg         rd_err;
    reg [63:0]  rd_prev;
    reg [3:0]   rd_widx;       // record word being read (S_RD)

    // burst sizing: words up to the next 4 KiB boundary and the 256-beat limit
    wire [LANE_W-1:0] rq_lane = LANES > 1 ? rd_req_addr[3 +: LANE_W] : {LANE_W{1'b0}};
    wire [15:0] rq_lane16 = LANES > 1 ? {{(16-LANE_W){1'b0}}, rq_lane} : 16'd0;
    wire [15:0] rq_to4k = 16'd512 - {7'd0, rd_req_addr[11:3]};
    wire [15:0] rq_tomax = MAX_BURST_WORDS - rq_lane16;
    wire [15:0] rq_lim = rq_to4k < rq_tomax ? rq_to4k : rq_tomax;
    wire [15:0] rq_n = rd_req_left < {16'd0, rq_lim} ? rd_req_left[15:0] : rq_lim;
    wire [15:0] rq_beats = (rq_lane16 + rq_n + LAST_LANE_I[15:0]) >> LANE_LOG;

    wire g_ready = (state == S_RD) || (state == S_RZ_CI) || (state == S_RZ_RD) ||
                   (state == S_MTT && (!mr_cmd_valid || mr_cmd_ready));
    wire [63:0] g_word = beat[64*rb_lane +: 64];
    wire g_fire = beat_v && g_ready;
    wire rb_beat_end = rb_lane == LAST_LANE || rb_left == 16'd1;
    wire w_fire = g_fire && (rd_s == 3'd0 || !rd_first);
    wire [127:0] rd_pair = {g_word, rd_prev} >> {rd_s, 3'b000};
    wire [63:0] w_data = rd_s == 3'd0 ? g_word : rd_pair[63:0];
    wire rd_done = !rd_go && !rd_active;

    assign m_axi_rready = !beat_v && rburst;

    always @(posedge clk) begin
        if (m_axi_rvalid && m_axi_rready)
            beat <= m_axi_rdata;
        if (g_fire)
            rd_prev <= g_word;
        if (rd_go)
            rd_widx <= rd_go_widx;
        else if (w_fire)
            rd_widx <= rd_widx + 4'd1;
        if (rd_go) begin
            rd_s <= rd_go_addr[2:0];
            rd_req_addr <= {rd_go_addr[63:3], 3'b000};
            rd_req_left <= rd_go_words + (rd_go_addr[2:0] != 3'd0);
            rd_g_left <= rd_go_words + (rd_go_addr[2:0] != 3'd0);
        end
        if (rd_active && !rburst && !ar_v && rd_req_left != 32'd0) begin
            ar_addr <= {rd_req_addr[63:BEAT_LOG], {BEAT_LOG{1'b0}}};
            ar_len <= rq_beats[7:0] - 8'd1;
            rb_left <= rq_n;
            rb_lane <= rq_lane;
            rd_req_addr <= rd_req_addr + {45'd0, rq_n, 3'b000};
            rd_req_left <= rd_req_left - {16'd0, rq_n};
        end else if (g_fire) begin
            rb_left <= rb_left - 16'd1;
            rb_lane <= rb_beat_end ? {LANE_W{1'b0}} : rb_lane + 1'b1;
        end
        if (g_fire)
            rd_g_left <= rd_g_left - 32'd1;
        if (rst) begin
            rd_active <= 1'b0;
            ar_v <= 1'b0;
            rburst <= 1'b0;
            beat_v <= 1'b0;
            rd_err <= 1'b0;
            rd_first <= 1'b0;
        end else begin
            if (rd_go) begin
                rd_active <= rd_go_words != 32'd0;
                rd_err <= 1'b0;
                rd_first <= 1'b1;
            end else if (g_fire && rd_g_left == 32'd1) begin
                rd_active <= 1'b0;
            end
            if (g_fire)
                rd_first <= 1'b0;
            if (rd_active && !rburst && !ar_v && rd_req_left != 32'd0) begin
                ar_v <= 1'b1;
                rburst <= 1'b1;
            end else begin
                if (m_axi_arready)
                    ar_v <= 1'b0;
                if (g_fire && rb_left == 16'd1)
                    rburst <= 1'b0;
            end
            if (m_axi_rvalid && m_axi_rready) begin
                beat_v <= 1'b1;
                if (m_axi_rresp != 2'b00)
                    rd_err <= 1'b1;
            end else if (g_fire && rb_beat_end) begin
                beat_v <= 1'b0;
            end
        end
    end

    assign m_axi_arid = {AXI_ID_WIDTH{1'b0}};
    assign m_axi_araddr = ar_addr[AXI_ADDR_WIDTH-1:0];
    assign m_axi_arlen = ar_len;
    assign m_axi_arsize = BEAT_LOG[2:0];
    assign m_axi_arburst = 2'b01;   // INCR
    assign m_axi_arlock = 1'b0;
    assign m_axi_arcache = 4'b0011;
    assign m_axi_arprot = 3'b010;
    assign m_axi_arvalid = ar_v;

    // ================================================================ write engine
    // Writes the first wr_go_words 8-byte words of `rec` to byte address wr_go_addr.
    reg         wr_active;
    reg [2:0]   wr_s;
    reg [4:0]   wr_n;          // record words
    reg [4:0]   wr_k;          // next grid word
    reg [63:0]  wr_req_addr;
    reg [4:0]   wr_req_left;   // grid words not yet in a burst
    reg         aw_v;
    reg [63:0]  aw_addr;
    reg [7:0]   aw_len;
    reg         wburst;        // AW issued, beats of the burst not all assembled
    reg [15:0]  wb_left;
    reg [LANE_W-1:0] wb_lane;
    reg         wb_v;
    reg         wb_last;
    reg [AXI_DATA_WIDTH-1:0] wb_data;
    reg [STRB_W-1:0] wb_strb;
    reg         b_wait;
    reg         wr_err;

    wire [LANE_W-1:0] wq_lane = LANES > 1 ? wr_req_addr[3 +: LANE_W] : {LANE_W{1'b0}};
    wire [15:0] wq_lane16 = LANES > 1 ? {{(16-LANE_W){1'b0}}, wq_lane} : 16'd0;
    wire [15:0] wq_to4k = 16'd512 - {7'd0, wr_req_addr[11:3]};
    wire [15:0] wq_tomax = MAX_BURST_WORDS - wq_lane16;
    wire [15:0] wq_lim = wq_to4k < wq_tomax ? wq_to4k : wq_tomax;
    wire [15:0] wq_n = {11'd0, wr_req_left} < wq_lim ? {11'd0, wr_req_left} : wq_lim;
    wire [15:0] wq_beats = (wq_lane16 + wq_n + LAST_LANE_I[15:0]) >> LANE_LOG;

    // grid word k: ({w_k, w_(k-1)} << 8s)[127:64], w_j = record word j (0 outside 0..n-1)
    // the output record's word k: hwif.DeviceCaps (QUERY_DEVICE), hwif.Cqc (QUERY_CQ, from
    // the CQ table) or rec (QUERY_QP)
    reg  [63:0] caps_w;
    reg  [63:0] cqq_w;
    // hwif.PortInfo: state, phys_state, max_mtu, reserved, speed_mbps
    wire [63:0] port_w = port_up ? {port_speed_mbps, 8'd0, 8'd5, 8'd5, 8'd4} :
                                   {32'd0, 8'd0, 8'd5, 8'd2, 8'd1};
    always @* begin
        case (wr_k[2:0])
            3'd0: caps_w = {CAP_MAX_CQ, CAP_MAX_QP};
            3'd1: caps_w = {CAP_MAX_MTT, CAP_MAX_MPT};
            3'd2: caps_w = {CAP_MAX_SGE, CAP_MAX_QP_WR};
            3'd3: caps_w = {CAP_MAX_QP_RD_ATOM, CAP_MAX_CQE};
            3'd4: caps_w = {CAP_MAX_UAR, CAP_MAX_INLINE};
            3'd5: caps_w = {32'd0, 32'd0};          // max_srq, max_eq: none
            default: caps_w = 64'd0;                // flags (no DevCap), reserved
        endcase
        // hwif.Cqc: cqn, log_size, state, pad, base, dbrec, eqn, uar
        case (wr_k[1:0])
            2'd0: cqq_w = {16'd0, 7'd0, cq_overrun[cq_sel], cqt_q[7:0],
                           {(32-CQ_AW){1'b0}}, cq_sel};
            2'd1: cqq_w = cqt_q[8 +: 64];
            2'd2: cqq_w = cqt_q[8+64 +: 64];
            default: cqq_w = {{(32-UAR_W){1'b0}}, cqt_q[8+64+64+32 +: UAR_W],
                              cqt_q[8+64+64 +: 32]};
        endcase
    end
    wire        wk_in = wr_k < wr_n;
    wire [63:0] wk = !wk_in ? 64'd0 :
                     op == OP_QUERY_DEVICE ? caps_w :
                     op == OP_QUERY_CQ ? cqq_w :
                     op == OP_QUERY_PORT ? port_w : rec[64*wr_k[3:0] +: 64];
    reg  [7:0]  wr_lstrb;         // strobe of the last record word
    wire [7:0]  wk_s = !wk_in ? 8'h00 : wr_k == wr_n - 5'd1 ? wr_lstrb : 8'hff;
    reg  [63:0] wkm;              // word k - 1 (0 before the first)
    reg  [7:0]  wkm_s;            // its strobe
    wire [127:0] wr_pair = {wk, wkm} << {wr_s, 3'b000};
    wire [15:0] wr_strb2 = {wk_s, wkm_s} << wr_s;
    integer wl;
    wire wr_place = wburst && !wb_v && wb_left != 16'd0;
    wire wb_end = wb_lane == LAST_LANE || wb_left == 16'd1;
    wire w_hs = wb_v && m_axi_wready;
    wire wr_done = !wr_go && !wr_active;

    always @(posedge clk) begin
        if (wr_go) begin
            wkm <= 64'd0;
            wkm_s <= 8'h00;
        end else if (wr_place) begin
            wkm <= wk;
            wkm_s <= wk_s;
        end
        if (wr_go) begin
            wr_lstrb <= wr_go_strb;
            wr_s <= wr_go_addr[2:0];
            wr_n <= wr_go_words;
            wr_k <= 5'd0;
            wr_req_addr <= {wr_go_addr[63:3], 3'b000};
            wr_req_left <= wr_go_words + (wr_go_addr[2:0] != 3'd0);
        end
        if (wr_active && !wburst && !b_wait && !aw_v && wr_req_left != 5'd0) begin
            aw_addr <= {wr_req_addr[63:BEAT_LOG], {BEAT_LOG{1'b0}}};
            aw_len <= wq_beats[7:0] - 8'd1;
            wb_left <= wq_n;
            wb_lane <= wq_lane;
            wr_req_addr <= wr_req_addr + {45'd0, wq_n, 3'b000};
            wr_req_left <= wr_req_left - wq_n[4:0];
        end else if (wr_place) begin
            for (wl = 0; wl < LANES; wl = wl + 1) begin
                if (wb_lane == wl[LANE_W-1:0]) begin
                    wb_data[64*wl +: 64] <= wr_pair[127:64];
                    wb_strb[8*wl +: 8] <= wr_strb2[15:8];
                end
            end
            wr_k <= wr_k + 5'd1;
            wb_left <= wb_left - 16'd1;
            wb_lane <= wb_end ? {LANE_W{1'b0}} : wb_lane + 1'b1;
        end
        if (wr_place)
            wb_last <= wb_left == 16'd1;
        if (rst || w_hs) begin
            wb_data <= {AXI_DATA_WIDTH{1'b0}};
            wb_strb <= {STRB_W{1'b0}};
        end
        if (rst) begin
            wr_active <= 1'b0;
            aw_v <= 1'b0;
            wburst <= 1'b0;
            wb_v <= 1'b0;
            b_wait <= 1'b0;
            wr_err <= 1'b0;
        end else begin
            if (wr_go) begin
                wr_active <= wr_go_words != 5'd0;
                wr_err <= 1'b0;
            end else if (wr_active && !wburst && !b_wait && !aw_v && wr_req_left == 5'd0) begin
                wr_active <= 1'b0;
            end
            if (wr_active && !wburst && !b_wait && !aw_v && wr_req_left != 5'd0) begin
                aw_v <= 1'b1;
                wburst <= 1'b1;
            end else if (m_axi_awready) begin
                aw_v <= 1'b0;
            end
            if (wr_place && wb_end)
                wb_v <= 1'b1;
            else if (w_hs)
                wb_v <= 1'b0;
            if (w_hs && wb_last) begin
                wburst <= 1'b0;
                b_wait <= 1'b1;
            end
            if (m_axi_bvalid) begin
                b_wait <= 1'b0;
                if (m_axi_bresp != 2'b00)
                    wr_err <= 1'b1;
            end
        end
    end

    assign m_axi_awid = {AXI_ID_WIDTH{1'b0}};
    assign m_axi_awaddr = aw_addr[AXI_ADDR_WIDTH-1:0];
    assign m_axi_awlen = aw_len;
    assign m_axi_awsize = BEAT_LOG[2:0];
    assign m_axi_awburst = 2'b01;   // INCR
    assign m_axi_awlock = 1'b0;
    assign m_axi_awcache = 4'b0011;
    assign m_axi_awprot = 3'b010;
    assign m_axi_awvalid = aw_v;
    assign m_axi_wdata = wb_data;
    assign m_axi_wstrb = wb_strb;
    assign m_axi_wlast = wb_last;
    assign m_axi_wvalid = wb_v;
    assign m_axi_bready = 1'b1;

    // ================================================================ table write ports
    always @* begin
        qram_we = 1'b0;
        qram_ww = qw[3:0];
        qram_wd = init_w;
        cqt_we = 1'b0;
        cqt_wd = {{REF_W{1'b0}}, cqc_uar[UAR_W-1:0], cqc_eqn, cqc_dbrec, cqc_base, cqc_log_size};
        case (state)
            S_CQP_WRITE: qram_we = 1'b1;                 // the new QP, word qw
            S_QP_OP: begin                                // to RESET / ERR: the state only
                if (op == OP_MODIFY_QP && to_reset_err) begin
                    qram_we = 1'b1;
                    qram_ww = 4'd0;
                    qram_wd = {qram_q[63:40], want_state, qram_q[31:0]};
                end
                if (op == OP_DP_ERR && cur_state != QPS_RESET) begin
                    qram_we = 1'b1;
                    qram_ww = 4'd0;
                    qram_wd = {qram_q[63:40], QPS_ERR, qram_q[31:0]};
                end
            end
            S_QP_MOD: begin                               // the modified QP, word qw
                qram_we = 1'b1;
                qram_wd = mod_w;
            end
            S_CCQ_WRITE: cqt_we = 1'b1;
            S_RZ_DB: begin                                 // RESIZE_CQ: new base, log_size
                if (wr_done && !wr_err) begin
                    cqt_we = 1'b1;
                    cqt_wd = {cqt_q[CQE_W-1:72], rz_base, rz_log};
                end
            end
            S_CQ_OP: begin
                if (op == OP_CREATE_QP || op == OP_DESTROY_QP) begin   // refs +/- 1
                    cqt_we = 1'b1;
                    cqt_wd = {ref_inc ? cq_refs + 1'b1 : cq_refs - 1'b1, cqt_q[CQE_W-REF_W-1:0]};
                end
            end
            default: ;
        endcase
    end

    // sq_psn written into word 6: CREATE_QP (0), or MODIFY_QP applying SQ_PSN
    always @(posedge clk) begin
        sq_psn_set_valid <= !rst && qw[3:0] == 4'd6 &&
                            (state == S_CQP_WRITE || (state == S_QP_MOD && be[48]));
        sq_psn_set_qpn <= sel_qpn;
        rq_psn_set_valid <= !rst && qw[3:0] == 4'd6 &&
                            (state == S_CQP_WRITE || (state == S_QP_MOD && be[52]));
        rq_psn_set_qpn <= sel_qpn;
    end

    // RESIZE_CQ: the CQEs software has not polled, the new ring's size, entries per chunk (4,
    // or the whole ring if smaller), the old-ring slot of the entry to read next
    wire [31:0] rz_unpolled = rz_pi - rz_ci;
    wire [32:0] rz_size = 33'd1 << rz_log[4:0];
    wire [2:0]  rz_cpc = rz_log[4:0] >= 5'd2 ? 3'd4 : rz_log[0] ? 3'd2 : 3'd1;
    wire [31:0] rz_omask = (32'd1 << rz_olog) - 32'd1;
    wire [31:0] rz_old_slot = (rz_ci + rz_k + {29'd0, rz_j}) & rz_omask;

    // ================================================================ command FSM
    integer rw;
    integer rj;
    wire        rec_we = ((state == S_RD || state == S_RZ_RD) && w_fire) || state == S_QP_COPY;
    wire [3:0]  rec_wi = state == S_QP_COPY ? qw[3:0] : rd_widx;
    wire [63:0] rec_bus = state == S_QP_COPY ? qram_q : w_data;
    assign dp_err_ready = state == S_IDLE && !cmd_go && !go_latch;
    always @(posedge clk) begin
        rd_go <= 1'b0;
        wr_go <= 1'b0;
        rd_go_widx <= 4'd0;
        wr_go_strb <= 8'hff;
        if (cmd_go && !busy && state != S_IDLE) begin
            go_latch <= 1'b1;     // the datapath's table access is running: the GO waits
            busy <= 1'b1;
        end
        wq_cfg_valid <= 1'b0;
        cq_cfg_valid <= 1'b0;
        bind_valid <= 1'b0;
        if (mr_cmd_valid && mr_cmd_ready)
            mr_cmd_valid <= 1'b0;

        case (state)
            S_IDLE: begin
                go_latch <= 1'b0;
                if (cmd_go || go_latch) begin
                    op <= go_op;
                    r_in <= cmd_in;
                    r_out <= cmd_out;
                    r_mod <= cmd_mod;
                    busy <= 1'b1;
                    fenced <= 1'b0;
                    cnt_cmds <= cnt_cmds + 32'd1;
                    state <= S_DECODE;
                end else if (dp_err_valid) begin
                    op <= OP_DP_ERR;
                    qp_sel <= dp_err_qpn[QP_AW-1:0];
                    qram_rw <= 4'd0;
                    if ({8'd0, dp_err_qpn} < NUM_QP && qp_valid[dp_err_qpn[QP_AW-1:0]])
                        state <= S_QP_RD;
                end
            end

            S_DECODE: begin
                if (op == OP_BAD) begin
                    st <= ST_BAD_OPCODE;
                    state <= S_DONE;
                end else if (in_words != 32'd0) begin
                    rd_go <= 1'b1;
                    rd_go_addr <= r_in;
                    rd_go_words <= in_words;
                    state <= S_RD;
                end else begin
                    state <= S_EXEC;
                end
            end

            S_RD: begin
                if (rd_done)
                    state <= S_EXEC;
            end

            S_EXEC: begin
                st <= ST_OK;
                if (in_words != 32'd0 && rd_err) begin
                    st <= ST_BAD_PARAM;
                    state <= S_DONE;
                end else begin
                    case (op)
                        OP_QUERY_DEVICE: begin
                            wr_go <= 1'b1;
                            wr_go_addr <= r_out;
                            wr_go_words <= 5'd7;       // hwif.DeviceCaps: 56 bytes
                            state <= S_WR;
                        end
                        OP_QUERY_PORT: begin
                            if (r_mod != 64'd1) begin
                                st <= ST_BAD_PARAM;
                                state <= S_DONE;
                            end else begin
                                wr_go <= 1'b1;
                                wr_go_addr <= r_out;
                                wr_go_words <= 5'd1;
                                state <= S_WR;
                            end
                        end
                        OP_INIT_HCA: begin
                            if (hca_in_log_mpt > LOG_MPT || hca_in_log_mtt > LOG_MTT) begin
                                st <= ST_EXCEED_LIM;
                            end else begin
                                mpt_entries <= {{LOG_MPT{1'b0}}, 1'b1} << hca_in_log_mpt[5:0];
                                mtt_entries <= {{LOG_MTT{1'b0}}, 1'b1} << hca_in_log_mtt[5:0];
                            end
                            state <= S_DONE;
                        end
                        OP_WRITE_MPT, OP_INVALIDATE_MPT: begin
                            if (!mpt_index_ok) begin
                                st <= ST_EXCEED_LIM;
                                state <= S_DONE;
                            end else begin
                                mr_cmd_valid <= 1'b1;
                                mr_cmd_op <= op == OP_WRITE_MPT ? MR_WRITE_MPT :
                                             MR_INVALIDATE_MPT;
                                mr_cmd_index <= r_mod[31:0];
                                mr_cmd_data <= rec[255:0];
                                fenced <= op == OP_INVALIDATE_MPT;
                                state <= S_MR;
                            end
                        end
                        OP_WRITE_MTT: begin
                            if (!mtt_range_ok) begin
                                st <= ST_EXCEED_LIM;
                                state <= S_DONE;
                            end else if (mtt_count == 32'd0) begin
                                state <= S_DONE;
                            end else begin
                                rd_go <= 1'b1;
                                rd_go_addr <= r_in + 64'd8;
                                rd_go_words <= mtt_count;
                                mtt_idx <= r_mod[31:0];
                                state <= S_MTT;
                            end
                        end
                        OP_CREATE_CQ: begin
                            if (ccq_bad) begin
                                st <= ST_BAD_PARAM;
                                state <= S_DONE;
                            end else if (ccq_big) begin
                                st <= ST_EXCEED_LIM;
                                state <= S_DONE;
                            end else begin
                                cq_sel <= cqc_cqn[CQ_AW-1:0];
                                state <= S_CCQ_WRITE;
                            end
                        end
                        OP_DESTROY_CQ, OP_QUERY_CQ: begin
                            if (!mod_cq_ok) begin
                                st <= ST_BAD_RESOURCE;
                                state <= S_DONE;
                            end else begin
                                cq_sel <= mod_cq;
                                state <= S_CQ_RD;
                            end
                        end
                        OP_RESIZE_CQ: begin
                            if (!mod_cq_ok) begin
                                st <= ST_BAD_RESOURCE;
                                state <= S_DONE;
                            end else if (ccq_big) begin
                                st <= ST_EXCEED_LIM;
                                state <= S_DONE;
                            end else begin
                                cq_sel <= mod_cq;
                                cq_hold <= 1'b1;
                                rz_base <= cqc_base;
                                rz_log <= cqc_log_size;
                                rz_err <= 1'b0;
                                state <= S_RZ_HOLD;
                            end
                        end
                        OP_CREATE_QP: begin
                            if (cqp_bad || cqp_bad_type) begin
                                st <= ST_BAD_PARAM;
                                state <= S_DONE;
                            end else if (cqp_no_cq) begin
                                st <= ST_BAD_RESOURCE;
                                state <= S_DONE;
                            end else begin
                                qp_sel <= qpc_qpn[QP_AW-1:0];
                                qw <= 5'd0;
                                ref_inc <= 1'b1;
                                ref_cqn0 <= qpc_send_cqn;
                                ref_cqn1 <= qpc_recv_cqn;
                                state <= S_REF0;
                            end
                        end
                        OP_MODIFY_QP: begin
                            if (!mqp_ok) begin
                                st <= ST_BAD_RESOURCE;
                                state <= S_DONE;
                            end else begin
                                qp_sel <= qpc_qpn[QP_AW-1:0];
                                qram_rw <= 4'd0;
                                state <= S_QP_RD;
                            end
                        end
                        OP_QUERY_QP, OP_DESTROY_QP: begin
                            if (!mod_qp_ok) begin
                                st <= ST_BAD_RESOURCE;
                                state <= S_DONE;
                            end else begin
                                qp_sel <= mod_qp;
                                qram_rw <= 4'd0;
                                state <= S_QP_RD;
                            end
                        end
                        default: begin
                            st <= ST_BAD_OPCODE;
                            state <= S_DONE;
                        end
                    endcase
                end
            end

            S_QP_RD: state <= S_QP_OP;    // word 0 is read

            S_QP_OP: begin                // qram_q: word 0 of the QP's Qpc
                qw <= 5'd0;
                qram_rw <= 4'd1;
                if (op == OP_DP_ERR) begin    // word 0 written this cycle (table write port)
                    state <= S_IDLE;
                end else if (op == OP_MODIFY_QP) begin
                    old_st <= cur_state;
                    new_st <= want_state;
                    wq_cfg_qpn <= sel_qpn;
                    wq_cfg_index <= 16'd0;
                    if (want_state > QPS_ERR || bad_sgid) begin
                        st <= ST_BAD_PARAM;
                        state <= S_DONE;
                    end else if (to_reset_err) begin    // word 0 written this cycle
                        if (want_state == QPS_RESET) begin
                            wq_cfg_valid <= 1'b1;
                            wq_cfg_enable <= 1'b0;
                        end
                        state <= S_DONE;
                    end else if (!legal) begin
                        st <= ST_BAD_STATE;
                        state <= S_DONE;
                    end else begin
                        state <= S_QP_MOD;
                    end
                end else begin            // QUERY_QP, DESTROY_QP: copy the Qpc into rec
                    state <= S_QP_COPY;
                end
            end

            // word qw is in qram_q (its read was issued the cycle before); the next is read
            S_QP_MOD: begin               // MODIFY_QP: word qw rewritten this cycle
                qw <= qw + 5'd1;
                qram_rw <= qw[3:0] + 4'd2;
                if (qw == 5'd2)
                    sq_base[31:0] <= qram_q[63:32];      // bytes 20..23
                if (qw == 5'd3)
                    sq_base[63:32] <= qram_q[31:0];      // bytes 24..27
                if (qw == 5'd4) begin
                    sq_lsize <= qram_q[39:32];           // byte 36
                    sq_lstride <= qram_q[47:40];         // byte 37
                end
                if (qw == 5'd15) begin
                    if (old_st == QPS_RTR && new_st == QPS_RTS) begin
                        wq_cfg_valid <= 1'b1;
                        wq_cfg_enable <= 1'b1;
                        wq_cfg_base <= sq_base[AXI_ADDR_WIDTH-1:0];
                        wq_cfg_log_size <= sq_lsize[4:0];
                        wq_cfg_log_stride <= sq_lstride[3:0];
                    end
                    state <= S_DONE;
                end
            end

            S_QP_COPY: begin              // rec word qw <= qram_q (below)
                qw <= qw + 5'd1;
                qram_rw <= qw[3:0] + 4'd2;
                if (qw == 5'd15) begin
                    if (op == OP_QUERY_QP) begin
                        wr_go <= 1'b1;
                        wr_go_addr <= r_out;
                        wr_go_words <= 5'd16;
                        state <= S_WR;
                    end else begin        // DESTROY_QP (words 1, 2 are in rec by now)
                        qp_valid[qp_sel] <= 1'b0;
                        bind_valid <= 1'b1;
                        bind_cq <= 1'b0;
                        bind_num <= {{(32-QP_AW){1'b0}}, qp_sel};
                        bind_uar <= 16'd0;
                        wq_cfg_valid <= 1'b1;
                        wq_cfg_enable <= 1'b0;
                        wq_cfg_qpn <= sel_qpn;
                        ref_inc <= 1'b0;
                        ref_cqn0 <= rec[8*12 +: 32];   // send_cqn
                        ref_cqn1 <= rec[8*16 +: 32];   // recv_cqn
                        fenced <= 1'b1;
                        state <= S_REF0;
                    end
                end
            end

            // CQ reference counts: +1 (CREATE_QP) or -1 (DESTROY_QP, CQs that exist) on the
            // send CQ, then on the receive CQ (read-modify-write of the CQ table)
            S_REF0: begin
                ref_step <= 1'b0;
                if (ref_cqn0 < NUM_CQ && cq_valid[ref_cqn0[CQ_AW-1:0]]) begin
                    cq_sel <= ref_cqn0[CQ_AW-1:0];
                    state <= S_CQ_RD;
                end else begin
                    state <= S_REF1;
                end
            end

            S_REF1: begin
                ref_step <= 1'b1;
                if (ref_cqn1 < NUM_CQ && cq_valid[ref_cqn1[CQ_AW-1:0]]) begin
                    cq_sel <= ref_cqn1[CQ_AW-1:0];
                    state <= S_CQ_RD;
                end else begin
                    state <= ref_inc ? S_CQP_WRITE : S_FENCE;
                end
            end

            S_CQ_RD: state <= S_CQ_OP;

            S_CQ_OP: begin
                if (op == OP_QUERY_CQ) begin    // the writer takes the Cqc from cqt_q
                    wr_go <= 1'b1;
                    wr_go_addr <= r_out;
                    wr_go_words <= 5'd4;
                    state <= S_WR;
                end else if (op == OP_DESTROY_CQ) begin
                    if (cq_refs != {REF_W{1'b0}}) begin
                        st <= ST_BUSY;
                        state <= S_DONE;
                    end else begin
                        cq_valid[cq_sel] <= 1'b0;
                        bind_valid <= 1'b1;
                        bind_cq <= 1'b1;
                        bind_num <= {{(32-CQ_AW){1'b0}}, cq_sel};
                        bind_uar <= 16'd0;
                        cq_cfg_valid <= 1'b1;
                        cq_cfg_cqn <= sel_cqn;
                        cq_cfg_enable <= 1'b0;
                        cq_cfg_index <= 32'd0;
                        fenced <= 1'b1;
                        state <= S_FENCE;
                    end
                end else if (!ref_step) begin
                    state <= S_REF1;
                end else begin
                    state <= ref_inc ? S_CQP_WRITE : S_FENCE;
                end
            end

            S_CQP_WRITE: begin    // CREATE_QP: word qw of the new Qpc is written this cycle
                qw <= qw + 5'd1;
                if (qw == 5'd15) begin
                    qp_valid[qp_sel] <= 1'b1;
                    bind_valid <= 1'b1;
                    bind_cq <= 1'b0;
                    bind_num <= qpc_qpn;
                    bind_uar <= qpc_uar[15:0];
                    wq_cfg_valid <= 1'b1;
                    wq_cfg_qpn <= qpc_qpn[QPN_WIDTH-1:0];
                    wq_cfg_enable <= 1'b0;
                    wq_cfg_base <= rec[8*20 +: AXI_ADDR_WIDTH];
                    wq_cfg_log_size <= rec[8*36 +: 5];
                    wq_cfg_log_stride <= rec[8*37 +: 4];
                    wq_cfg_index <= 16'd0;
                    state <= S_DONE;
                end
            end

            S_CCQ_WRITE: begin    // CREATE_CQ: the entry is written this cycle
                cq_valid[cq_sel] <= 1'b1;
                cq_overrun[cq_sel] <= 1'b0;
                bind_valid <= 1'b1;
                bind_cq <= 1'b1;
                bind_num <= cqc_cqn;
                bind_uar <= cqc_uar[15:0];
                cq_cfg_valid <= 1'b1;
                cq_cfg_cqn <= cqc_cqn[CQN_WIDTH-1:0];
                cq_cfg_enable <= 1'b1;
                cq_cfg_index <= 32'd0;
                cq_cfg_base <= cqc_base[AXI_ADDR_WIDTH-1:0];
                cq_cfg_log_size <= cqc_log_size[4:0];
                state <= S_DONE;
            end

            S_MTT: begin
                if (w_fire) begin
                    mr_cmd_valid <= 1'b1;
                    mr_cmd_op <= MR_WRITE_MTT;
                    mr_cmd_index <= mtt_idx;
                    mr_cmd_data <= {192'd0, w_data};
                    mtt_idx <= mtt_idx + 32'd1;
                end
                if (rd_done && (!mr_cmd_valid || mr_cmd_ready)) begin
                    if (rd_err)
                        st <= ST_BAD_PARAM;
                    state <= S_DONE;
                end
            end

            S_MR: begin
                if (!mr_cmd_valid || mr_cmd_ready)
                    state <= fenced ? S_FENCE : S_DONE;
            end

            S_WR: begin
                if (wr_done) begin
                    if (wr_err)
                        st <= ST_BAD_PARAM;
                    state <= S_DONE;
                end
            end

            S_FENCE: begin
                cq_hold <= 1'b0;      // (RESIZE_CQ: its cqe_write cfg took effect, held)
                if (dma_idle)
                    state <= S_DONE;
            end

            // RESIZE_CQ (see the header): hold, drain, consumer index, move, doorbell record
            S_RZ_HOLD: state <= S_RZ_DRAIN;    // the CQ entry is read

            S_RZ_DRAIN: begin
                if (!cq_busy) begin
                    rz_obase <= cqt_q[8 +: 64];
                    rz_olog <= cqt_q[4:0];
                    rz_dbrec <= cqt_q[72 +: 64];
                    rz_pi <= cq_pi[32*cq_sel +: 32];
                    rd_go <= 1'b1;
                    rd_go_addr <= cqt_q[72 +: 64];
                    rd_go_words <= 32'd1;
                    state <= S_RZ_CI;
                end
            end

            S_RZ_CI: begin
                if (w_fire)
                    rz_ci <= w_data[31:0];
                if (rd_done) begin
                    if (rd_err) begin
                        st <= ST_BAD_PARAM;
                        cq_hold <= 1'b0;
                        state <= S_DONE;
                    end else begin
                        state <= S_RZ_CHK;
                    end
                end
            end

            S_RZ_CHK: begin
                rz_n <= rz_unpolled;
                rz_k <= 32'd0;
                if ({1'b0, rz_unpolled} > rz_size) begin
                    st <= ST_BAD_PARAM;
                    cq_hold <= 1'b0;
                    state <= S_DONE;
                end else begin
                    state <= S_RZ_CHUNK;
                end
            end

            S_RZ_CHUNK: begin
                rec <= 1024'd0;
                rz_j <= 3'd0;
                state <= S_RZ_NEXT;
            end

            S_RZ_NEXT: begin
                if ({1'b0, rz_j} < {1'b0, rz_cpc} && rz_k + {29'd0, rz_j} < rz_n) begin
                    rd_go <= 1'b1;
                    rd_go_addr <= rz_obase + {27'd0, rz_old_slot, 5'd0};
                    rd_go_words <= 32'd4;
                    rd_go_widx <= {rz_j[1:0], 2'b00};
                    state <= S_RZ_RD;
                end else begin
                    wr_go <= 1'b1;
                    wr_go_addr <= rz_base + {27'd0, rz_k, 5'd0};
                    wr_go_words <= {rz_cpc[2:0], 2'b00};
                    state <= S_RZ_WR;
                end
            end

            S_RZ_RD: begin
                if (rd_done) begin
                    for (rj = 0; rj < 4; rj = rj + 1)
                        if (rz_j[1:0] == rj[1:0])
                            rec[8*(32*rj+31) +: 8] <= 8'd1;   // owner of the moved CQE
                    if (rd_err)
                        rz_err <= 1'b1;
                    rz_j <= rz_j + 3'd1;
                    state <= S_RZ_NEXT;
                end
            end

            S_RZ_WR: begin
                if (wr_done) begin
                    if (wr_err)
                        rz_err <= 1'b1;
                    if ({1'b0, rz_k} + {30'd0, rz_cpc} >= rz_size) begin
                        if (rz_err || wr_err) begin
                            st <= ST_BAD_PARAM;
                            cq_hold <= 1'b0;
                            state <= S_DONE;
                        end else begin
                            rec[63:0] <= 64'd0;
                            wr_go <= 1'b1;
                            wr_go_addr <= rz_dbrec;
                            wr_go_words <= 5'd1;
                            wr_go_strb <= 8'h0f;    // the u32 consumer index only
                            state <= S_RZ_DB;
                        end
                    end else begin
                        rz_k <= rz_k + {29'd0, rz_cpc};
                        state <= S_RZ_CHUNK;
                    end
                end
            end

            S_RZ_DB: begin
                if (wr_done) begin
                    if (wr_err) begin
                        st <= ST_BAD_PARAM;
                        cq_hold <= 1'b0;
                        state <= S_DONE;
                    end else begin    // the CQ table entry is rewritten this cycle
                        cq_cfg_valid <= 1'b1;
                        cq_cfg_cqn <= sel_cqn;
                        cq_cfg_enable <= 1'b1;
                        cq_cfg_base <= rz_base[AXI_ADDR_WIDTH-1:0];
                        cq_cfg_log_size <= rz_log[4:0];
                        cq_cfg_index <= rz_n;
                        fenced <= 1'b1;
                        state <= S_FENCE;    // (the hold ends there, after the cfg)
                    end
                end
            end

            default: begin    // S_DONE
                status <= st;
                busy <= 1'b0;
                if (st != ST_OK)
                    cnt_errors <= cnt_errors + 32'd1;
                state <= S_IDLE;
            end
        endcase

        if (cq_overrun_valid && cq_overrun_cqn_ok)
            cq_overrun[cq_overrun_cqn[CQ_AW-1:0]] <= 1'b1;

        // rec is written a word at a time: input words (S_RD) and QP-table words (S_QP_COPY)
        for (rw = 0; rw < 16; rw = rw + 1)
            if (rec_we && rec_wi == rw[3:0])
                rec[64*rw +: 64] <= rec_bus;

        if (rst) begin
            state <= S_IDLE;
            go_latch <= 1'b0;
            busy <= 1'b0;
            status <= ST_OK;
            mpt_entries <= {(LOG_MPT+1){1'b0}};
            mtt_entries <= {(LOG_MTT+1){1'b0}};
            qp_valid <= {NUM_QP{1'b0}};
            cq_valid <= {NUM_CQ{1'b0}};
            cq_overrun <= {NUM_CQ{1'b0}};
            mr_cmd_valid <= 1'b0;
            rd_go <= 1'b0;
            wr_go <= 1'b0;
            wq_cfg_valid <= 1'b0;
            cq_cfg_valid <= 1'b0;
            cq_hold <= 1'b0;
            bind_valid <= 1'b0;
            cnt_cmds <= 32'd0;
            cnt_errors <= 32'd0;
        end
    end

    /* verilator lint_off UNUSEDSIGNAL */
    wire unused = &{1'b0, m_axi_rid, m_axi_rlast, m_axi_bid, dp_ctx_qpn, dp2_ctx_qpn, rd_s, wr_strb2[7:0], wr_pair[63:0],
                    wq_beats[15:8], rd_pair[127:64], rq_beats[15:8], qpc_attr_mask,
                    sq_lstride[7:4], sq_lsize[7:5]};
    /* verilator lint_on UNUSEDSIGNAL */

    // Protocol checkers on the ports (simulation only: nic_common.vh)
    `NIC_CHECK_AXI_MASTER("nic_cmd DMA", AXI_ID_WIDTH, AXI_ADDR_WIDTH, AXI_DATA_WIDTH)

endmodule
`default_nettype wire
