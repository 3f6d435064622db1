`default_nettype none
`include "nic_common.vh"
// roce_nic: the nsnic RoCEv2 NIC (nicsim.hwif), as far as it is built: the host interface
// (BAR0 over AXI4-Lite), the command processor with the QP/CQ context tables, address
// translation (MPT/MTT), SQ WQE fetch, the requester (RC SEND / RDMA WRITE, with immediate,
// RDMA READ, CMP_SWAP, FETCH_ADD) with the transmit framer and ICRC, the receive path, the
// completer, the responder (RC SEND / RDMA WRITE / RDMA READ / atomics from the peer; it also
// places READ responses and atomics' original values for the completer) and CQE writeback,
// sharing one AXI4 master to host memory. The unchanged nicsim kernel driver programs it and its verbs post work to it
// (hdl_tb/test_roce_nic_cmd.py, hdl_tb/test_roce_nic_req.py).
//
//   AXI4-Lite --> nic_bar --cmd--> nic_cmd --mr cmd--> mr_translate <-- roce_req | mr_req_*
//                  |  ^bind          |  |--wq cfg--> wqe_fetch --WQEs--> roce_req
//                  |                 |  |--QP table read port, sq_psn set---^   |
//                  |                 |  '--cq cfg--> cqe_write <-- roce_req | s_cqe_*
//                  |--SQ doorbells-----------------> wqe_fetch      roce_req --> roce_tx
//                  '--doorbell / arm events --> db_*, arm_*        roce_tx --> m_axis_tx_*
//   DMA: reads  wqe_fetch (port 0), nic_cmd (port 1), roce_req payload (port 2), roce_resp
//               receive WQEs, READ response payload, atomics' 8 bytes (port 3) --> axi_rd_arb
//               --> m_axi (AR/R)
//        writes cqe_write (port 0), nic_cmd (port 1), roce_resp payload and atomic results
//               (port 2)
//               --> axi_wr_arb --> m_axi (AW/W/B)
//
// AXI IDs: the units issue ID 0; the arbiters append the port index in the low bits, so
// m_axi_arid = port (0: wqe_fetch, 1: nic_cmd, 2: roce_req, 3: roce_resp) and m_axi_awid =
// port (0: cqe_write, 1: nic_cmd, 2: roce_resp). Each unit's requests are in order among themselves (one ID per
// unit); the slave may reorder between units. Every unit that reads takes its read data
// whenever it comes (it reserves room before it asks), so one unit's stalled consumer never
// holds up another's data on an in-order interconnect.
// Fence: nic_cmd's dma_idle is the write arbiter's idle (no AW pending or in flight, no B
// outstanding): INVALIDATE_MPT, DESTROY_QP and DESTROY_CQ complete only after every
// CQE write issued before them has its B response. The engines to come that write host
// memory must join the write arbiter (or this idle) for the fence to cover them.
// wqe_fetch gets a QP's SQ when the QP enters RTS from RTR (index 0) and loses it at RESET
// and destroy; SQ doorbells before that are dropped by wqe_fetch (the provider posts sends
// only in RTS; its indexes restart at 0 after RESET). RQ doorbells and CQ arms are only
// reported on db_* / arm_* for now; INT_STATUS has no source yet (no EQs).
// Shared units with outside ports (for testbenches): mr_translate's lookup port is shared by
// roce_req and mr_req_* (the port that has lookups in flight keeps it until all are
// answered); cqe_write takes completions from roce_req first, then from s_cqe_*.
//
// Parameters:
//   AXI_DATA_WIDTH   DMA and Ethernet stream data width (64..1024, a power of two)
//   AXI_ADDR_WIDTH   DMA address width (<= 64)
//   AXI_ID_WIDTH     DMA ID width (>= 3)
//   AXIL_ADDR_WIDTH  BAR0 address width (>= 12 + clog2(MAX_UAR + 1))
//   AXIL_DATA_WIDTH  BAR0 data width: 64, or 32 for a PCIe bridge's 32-bit AXI4-Lite master
//                    (64-bit registers as two words: see nic_bar.v)
//   NUM_QP, NUM_CQ   QP / CQ contexts (powers of two, >= 2)
//   MPT_DEPTH, MTT_DEPTH   translation tables (powers of two)
//   MAX_UAR, MAX_QP_WR, MAX_SGE, MAX_CQE, MAX_QP_RD_ATOM, MAX_INLINE   QUERY_DEVICE
//                    capacities (MAX_SGE is also the SGEs wqe_fetch decodes)
//   WQE_OUTSTANDING, CQE_OUTSTANDING   bursts in flight in wqe_fetch / cqe_write
//   TAG_WIDTH        mr_translate request tag width
//   PAY_DEPTH        requester payload FIFO, in beats (power of two; >= 2 pages' worth; 0:
//                    16 KiB from 256 bits up, else 8 KiB)
//   SQ_OUT           WQEs outstanding per QP (unacknowledged; power of two)
//   MAC_FIFO_DEPTH   the transmit and receive frame FIFOs (axis_frame_fifo.v), in beats
//                    (power of two; 0: 16 KiB, two frames of a 4 KiB MTU). Transmit: store and
//                    forward, so a frame leaves back to back however the DMA stalls (a
//                    CMAC aborts a frame with a tvalid gap). Receive: s_axis_rx_tready is
//                    always high (a MAC cannot be held off); a frame that finds it full is
//                    dropped whole and counted in cnt_rx_fifo_drops
//   CLK_NS_LOG2      log2 of the clock period in ns (transport and RNR timers)
//
// Ports:
//   clk, rst                    clock, synchronous active-high reset
//   s_axil_*                    BAR0 (AXI4-Lite slave, AXIL_DATA_WIDTH-bit data; see nic_bar.v)
//   m_axi_*                     DMA (AXI4 master)
//   port_up, port_speed_mbps    the Ethernet link's state and rate (QUERY_PORT reports them)
//   m_axis_tx_*                 Ethernet frames out (AXI-Stream, packed, no FCS; tuser = 1 on
//                               the last beat: a bad frame, to be dropped by the MAC), each
//                               one's beats back to back (tready may pause them)
//   db_valid, db_rq, db_qpn, db_pi, arm_valid, arm_cqn, arm_solicited   accepted doorbells
//   sq_ci[NUM_QP*16-1:0]        wqe_fetch fetch indexes
//   s_cqe_*                     completions to write (cqe_write.v), after roce_req's
//   cq_pi[NUM_CQ*32-1:0], cqe_wr_error   cqe_write producer indexes, sticky write error
//   cq_overrun_valid, cq_overrun_cqn     a CQ overran (QUERY_CQ reports OVERRUN; cqe_write
//                               does not detect a full CQ yet, the engine that does drives it)
//   mr_req_*, mr_rsp_*          translation lookups (mr_translate.v), shared with roce_req
//   cnt_db_sq, cnt_db_rq, cnt_arm, cnt_db_drop, cnt_cmds, cnt_cmd_errors   counters
//   s_axis_rx_*                 Ethernet frames in (AXI-Stream, no FCS; tuser on the last beat:
//                               a bad frame); tready is always high
//   mac_addr                    the port's MAC address (frames to other addresses are dropped)
//   cnt_req_wqes, cnt_req_pkts, cnt_req_bytes, cnt_req_errors, cnt_req_resent   requester
//   cnt_rx_fifo_drops           frames dropped whole because the receive FIFO was full
//   cnt_rx_packets, cnt_rx_drops   RoCE packets received, and dropped (not for us, unknown QP,
//                               other transports, any drop of roce_rx)
//   cnt_comp_*                  completer counters (roce_comp.v)
//   cnt_resp_*                  responder counters (roce_resp.v)
module roce_nic #(
    parameter AXI_DATA_WIDTH = 64,
    parameter AXI_ADDR_WIDTH = 64,
    parameter AXI_ID_WIDTH = 4,
    parameter AXIL_ADDR_WIDTH = 23,
    parameter AXIL_DATA_WIDTH = 64,
    parameter NUM_QP = 64,
    parameter NUM_CQ = 64,
    parameter MPT_DEPTH = 256,
    parameter MTT_DEPTH = 4096,
    parameter MAX_UAR = 1024,
    parameter MAX_QP_WR = 32768,
    parameter MAX_SGE = 4,
    parameter MAX_CQE = 1048576,
    parameter MAX_QP_RD_ATOM = 16,
    parameter MAX_INLINE = 256,
    parameter WQE_OUTSTANDING = 16,
    parameter CQE_OUTSTANDING = 4,
    parameter TAG_WIDTH = 8,
    parameter PAY_DEPTH = 0,
    parameter SQ_OUT = 32,
    parameter MAC_FIFO_DEPTH = 0,
    parameter CLK_NS_LOG2 = 2
) (
    input  wire                          clk,
    input  wire                          rst,

    `NIC_AXIL_SLAVE_PORTS(AXIL_ADDR_WIDTH, AXIL_DATA_WIDTH),

    `NIC_AXI_WR_MASTER_PORTS(AXI_ID_WIDTH, AXI_ADDR_WIDTH, AXI_DATA_WIDTH),
    `NIC_AXI_RD_MASTER_PORTS(AXI_ID_WIDTH, AXI_ADDR_WIDTH, AXI_DATA_WIDTH),

    output wire                          db_valid,
    output wire                          db_rq,
    output wire [23:0]                   db_qpn,
    output wire [15:0]                   db_pi,
    output wire                          arm_valid,
    output wire [23:0]                   arm_cqn,
    output wire                          arm_solicited,

    input  wire                          port_up,
    input  wire [31:0]                   port_speed_mbps,

    output wire [AXI_DATA_WIDTH-1:0]     m_axis_tx_tdata,
    output wire [AXI_DATA_WIDTH/8-1:0]   m_axis_tx_tkeep,
    output wire                          m_axis_tx_tvalid,
    input  wire                          m_axis_tx_tready,
    output wire                          m_axis_tx_tlast,
    output wire                          m_axis_tx_tuser,
    input  wire [AXI_DATA_WIDTH-1:0]     s_axis_rx_tdata,
    input  wire [AXI_DATA_WIDTH/8-1:0]   s_axis_rx_tkeep,
    input  wire                          s_axis_rx_tvalid,
    output wire                          s_axis_rx_tready,
    input  wire                          s_axis_rx_tlast,
    input  wire                          s_axis_rx_tuser,
    input  wire [47:0]                   mac_addr,

    output wire [NUM_QP*16-1:0]          sq_ci,

    input  wire                          s_cqe_valid,
    output wire                          s_cqe_ready,
    input  wire [23:0]                   s_cqe_cqn,
    input  wire [31:0]                   s_cqe_qpn,
    input  wire [15:0]                   s_cqe_wqe_index,
    input  wire [7:0]                    s_cqe_opcode,
    input  wire [7:0]                    s_cqe_status,
    input  wire [31:0]                   s_cqe_byte_len,
    input  wire [31:0]                   s_cqe_imm_inv,
    input  wire [31:0]                   s_cqe_src_qp,
    input  wire [7:0]                    s_cqe_flags,
    input  wire [7:0]                    s_cqe_vendor_err,
    output wire [NUM_CQ*32-1:0]          cq_pi,
    output wire                          cqe_wr_error,
    input  wire                          cq_overrun_valid,
    input  wire [23:0]                   cq_overrun_cqn,

    input  wire                          mr_req_valid,
    output wire                          mr_req_ready,
    input  wire [31:0]                   mr_req_key,
    input  wire [31:0]                   mr_req_pd,
    input  wire [7:0]                    mr_req_access,
    input  wire [63:0]                   mr_req_va,
    input  wire [31:0]                   mr_req_len,
    input  wire [TAG_WIDTH-1:0]          mr_req_tag,
    output wire                          mr_rsp_valid,
    input  wire                          mr_rsp_ready,
    output wire [2:0]                    mr_rsp_status,
    output wire [AXI_ADDR_WIDTH-1:0]     mr_rsp_pa,
    output wire [12:0]                   mr_rsp_len,
    output wire                          mr_rsp_last,
    output wire [TAG_WIDTH-1:0]          mr_rsp_tag,

    output wire [31:0]                   cnt_db_sq,
    output wire [31:0]                   cnt_db_rq,
    output wire [31:0]                   cnt_arm,
    output wire [31:0]                   cnt_db_drop,
    output wire [31:0]                   cnt_cmds,
    output wire [31:0]                   cnt_cmd_errors,
    output wire [31:0]                   cnt_req_wqes,
    output wire [31:0]                   cnt_req_pkts,
    output wire [31:0]                   cnt_req_bytes,
    output wire [31:0]                   cnt_req_errors,
    output wire [31:0]                   cnt_req_resent,
    output wire [31:0]                   cnt_rx_fifo_drops,
    output wire [31:0]                   cnt_rx_packets,
    output wire [31:0]                   cnt_rx_drops,
    output wire [31:0]                   cnt_comp_acks,
    output wire [31:0]                   cnt_comp_naks,
    output wire [31:0]                   cnt_comp_timeouts,
    output wire [31:0]                   cnt_comp_resends,
    output wire [31:0]                   cnt_comp_cqes,
    output wire [31:0]                   cnt_comp_unexpected,
    output wire [31:0]                   cnt_resp_requests,
    output wire [31:0]                   cnt_resp_bytes,
    output wire [31:0]                   cnt_resp_acks,
    output wire [31:0]                   cnt_resp_naks,
    output wire [31:0]                   cnt_resp_duplicates,
    output wire [31:0]                   cnt_resp_dropped,
    output wire [31:0]                   cnt_resp_atomics
);

    localparam DW = AXI_DATA_WIDTH;
    localparam AW = AXI_ADDR_WIDTH;
    localparam SW = DW / 8;
    localparam QPN_W = 24;
    localparam CQN_W = 24;
    localparam KW_LOG = DW <= 64 ? 3 : DW <= 128 ? 4 : DW <= 256 ? 5 : DW <= 512 ? 6 : 7;
    // payload FIFO: the PCIe read bandwidth-delay product. A 4 KiB read takes ~840 ns from its
    // address to its last beat on PCIe Gen3 x16 (~560 ns round trip + the completions), and
    // the FIFO's credits bound the reads in flight: at 512 bits (128 Gb/s) that is ~13.5 KB,
    // so 16 KiB (four page reads in flight); at 64 bits (10 Gb/s) two pages, 8 KiB, keep the
    // stream fed. At least 16 beats.
    localparam PAY_BYTES = DW >= 256 ? 16384 : 8192;
    localparam PAY_DEPTH_B = PAY_DEPTH != 0 ? PAY_DEPTH :
                             (PAY_BYTES >> KW_LOG) < 16 ? 16 : (PAY_BYTES >> KW_LOG);
    localparam MAC_FIFO_B = MAC_FIFO_DEPTH != 0 ? MAC_FIFO_DEPTH : (16384 >> KW_LOG);
    // READ response payload FIFO: one 4 KiB burst
    localparam RD_DEPTH_B = (4096 >> KW_LOG) < 16 ? 16 : (4096 >> KW_LOG);

    // ---------------------------------------------------------------- BAR <-> command processor
    wire        cmd_go;
    wire [63:0] cmd_opcode;
    wire [63:0] cmd_in;
    wire [63:0] cmd_out;
    wire [63:0] cmd_mod;
    wire        cmd_busy;
    wire [7:0]  cmd_status;
    wire        bind_valid;
    wire        bind_cq;
    wire [31:0] bind_num;
    wire [15:0] bind_uar;

    nic_bar #(
        .AXIL_ADDR_WIDTH(AXIL_ADDR_WIDTH),
        .AXIL_DATA_WIDTH(AXIL_DATA_WIDTH),
        .MAX_UAR(MAX_UAR),
        .NUM_QP(NUM_QP),
        .NUM_CQ(NUM_CQ),
        .QPN_WIDTH(QPN_W),
        .CQN_WIDTH(CQN_W)
    ) u_bar (
        .clk(clk),
        .rst(rst),
        .s_axil_awaddr(s_axil_awaddr),
        .s_axil_awprot(s_axil_awprot),
        .s_axil_awvalid(s_axil_awvalid),
        .s_axil_awready(s_axil_awready),
        .s_axil_wdata(s_axil_wdata),
        .s_axil_wstrb(s_axil_wstrb),
        .s_axil_wvalid(s_axil_wvalid),
        .s_axil_wready(s_axil_wready),
        .s_axil_bresp(s_axil_bresp),
        .s_axil_bvalid(s_axil_bvalid),
        .s_axil_bready(s_axil_bready),
        .s_axil_araddr(s_axil_araddr),
        .s_axil_arprot(s_axil_arprot),
        .s_axil_arvalid(s_axil_arvalid),
        .s_axil_arready(s_axil_arready),
        .s_axil_rdata(s_axil_rdata),
        .s_axil_rresp(s_axil_rresp),
        .s_axil_rvalid(s_axil_rvalid),
        .s_axil_rready(s_axil_rready),
        .cmd_go(cmd_go),
        .cmd_opcode(cmd_opcode),
        .cmd_in(cmd_in),
        .cmd_out(cmd_out),
        .cmd_mod(cmd_mod),
        .cmd_busy(cmd_busy),
        .cmd_status(cmd_status),
        .int_set(64'd0),
        .bind_valid(bind_valid),
        .bind_cq(bind_cq),
        .bind_num(bind_num),
        .bind_uar(bind_uar),
        .db_valid(db_valid),
        .db_rq(db_rq),
        .db_qpn(db_qpn),
        .db_pi(db_pi),
        .arm_valid(arm_valid),
        .arm_cqn(arm_cqn),
        .arm_solicited(arm_solicited),
        .cnt_db_sq(cnt_db_sq),
        .cnt_db_rq(cnt_db_rq),
        .cnt_arm(cnt_arm),
        .cnt_db_drop(cnt_db_drop)
    );

    // ---------------------------------------------------------------- DMA ports of the units
    // read port 0: wqe_fetch, 1: nic_cmd, 2: roce_req, 3: roce_resp (receive WQEs, READ data);
    // write port 0: cqe_write, 1: nic_cmd, 2: roce_resp (payload)
    wire [3:0]    rd_arid;
    wire [4*AW-1:0] rd_araddr;
    wire [31:0]   rd_arlen;
    wire [11:0]   rd_arsize;
    wire [7:0]    rd_arburst;
    wire [3:0]    rd_arlock;
    wire [15:0]   rd_arcache;
    wire [11:0]   rd_arprot;
    wire [3:0]    rd_arvalid;
    wire [3:0]    rd_arready;
    wire [3:0]    rd_rid;
    wire [4*DW-1:0] rd_rdata;
    wire [7:0]    rd_rresp;
    wire [3:0]    rd_rlast;
    wire [3:0]    rd_rvalid;
    wire [3:0]    rd_rready;

    wire [2:0]    wr_awid;
    wire [3*AW-1:0] wr_awaddr;
    wire [23:0]   wr_awlen;
    wire [8:0]    wr_awsize;
    wire [5:0]    wr_awburst;
    wire [2:0]    wr_awlock;
    wire [11:0]   wr_awcache;
    wire [8:0]    wr_awprot;
    wire [2:0]    wr_awvalid;
    wire [2:0]    wr_awready;
    wire [3*DW-1:0] wr_wdata;
    wire [3*SW-1:0] wr_wstrb;
    wire [2:0]    wr_wlast;
    wire [2:0]    wr_wvalid;
    wire [2:0]    wr_wready;
    wire [2:0]    wr_bid;
    wire [5:0]    wr_bresp;
    wire [2:0]    wr_bvalid;
    wire [2:0]    wr_bready;
    wire          dma_idle;

    // ---------------------------------------------------------------- command processor
    wire         mr_cmd_valid;
    wire         mr_cmd_ready;
    wire [1:0]   mr_cmd_op;
    wire [31:0]  mr_cmd_index;
    wire [255:0] mr_cmd_data;
    wire         wq_cfg_valid;
    wire [QPN_W-1:0] wq_cfg_qpn;
    wire         wq_cfg_enable;
    wire [AW-1:0] wq_cfg_base;
    wire [4:0]   wq_cfg_log_size;
    wire [3:0]   wq_cfg_log_stride;
    wire [15:0]  wq_cfg_index;
    wire         qp_err_valid;
    wire         qp_err_ready;
    wire [QPN_W-1:0] qp_err_qpn;
    wire [QPN_W-1:0] dp2_ctx_qpn;
    wire [3:0]   dp2_ctx_word;
    wire [63:0]  dp2_ctx_data;
    wire         rq_psn_set_valid;
    wire [QPN_W-1:0] rq_psn_set_qpn;
    wire [QPN_W-1:0] dp_ctx_qpn;
    wire [3:0]   dp_ctx_word;
    wire [63:0]  dp_ctx_data;
    wire         sq_psn_set_valid;
    wire [QPN_W-1:0] sq_psn_set_qpn;
    wire         cq_cfg_valid;
    wire [CQN_W-1:0] cq_cfg_cqn;
    wire         cq_cfg_enable;
    wire [AW-1:0] cq_cfg_base;
    wire [4:0]   cq_cfg_log_size;
    wire [31:0]  cq_cfg_index;
    wire         cq_hold;              // RESIZE_CQ: cqe_write takes no completion
    wire         cq_busy;

    nic_cmd #(
        .AXI_DATA_WIDTH(DW),
        .AXI_ADDR_WIDTH(AW),
        .AXI_ID_WIDTH(1),
        .NUM_QP(NUM_QP),
        .NUM_CQ(NUM_CQ),
        .QPN_WIDTH(QPN_W),
        .CQN_WIDTH(CQN_W),
        .MPT_DEPTH(MPT_DEPTH),
        .MTT_DEPTH(MTT_DEPTH),
        .MAX_UAR(MAX_UAR),
        .MAX_QP_WR(MAX_QP_WR),
        .MAX_SGE(MAX_SGE),
        .MAX_CQE(MAX_CQE),
        .MAX_QP_RD_ATOM(MAX_QP_RD_ATOM),
        .MAX_INLINE(MAX_INLINE)
    ) u_cmd (
        .clk(clk),
        .rst(rst),
        .cmd_go(cmd_go),
        .cmd_opcode(cmd_opcode),
        .cmd_in(cmd_in),
        .cmd_out(cmd_out),
        .cmd_mod(cmd_mod),
        .busy(cmd_busy),
        .status(cmd_status),
        .m_axi_arid(rd_arid[1]),
        .m_axi_araddr(rd_araddr[AW +: AW]),
        .m_axi_arlen(rd_arlen[8 +: 8]),
        .m_axi_arsize(rd_arsize[3 +: 3]),
        .m_axi_arburst(rd_arburst[2 +: 2]),
        .m_axi_arlock(rd_arlock[1]),
        .m_axi_arcache(rd_arcache[4 +: 4]),
        .m_axi_arprot(rd_arprot[3 +: 3]),
        .m_axi_arvalid(rd_arvalid[1]),
        .m_axi_arready(rd_arready[1]),
        .m_axi_rid(rd_rid[1]),
        .m_axi_rdata(rd_rdata[DW +: DW]),
        .m_axi_rresp(rd_rresp[2 +: 2]),
        .m_axi_rlast(rd_rlast[1]),
        .m_axi_rvalid(rd_rvalid[1]),
        .m_axi_rready(rd_rready[1]),
        .m_axi_awid(wr_awid[1]),
        .m_axi_awaddr(wr_awaddr[AW +: AW]),
        .m_axi_awlen(wr_awlen[8 +: 8]),
        .m_axi_awsize(wr_awsize[3 +: 3]),
        .m_axi_awburst(wr_awburst[2 +: 2]),
        .m_axi_awlock(wr_awlock[1]),
        .m_axi_awcache(wr_awcache[4 +: 4]),
        .m_axi_awprot(wr_awprot[3 +: 3]),
        .m_axi_awvalid(wr_awvalid[1]),
        .m_axi_awready(wr_awready[1]),
        .m_axi_wdata(wr_wdata[DW +: DW]),
        .m_axi_wstrb(wr_wstrb[SW +: SW]),
        .m_axi_wlast(wr_wlast[1]),
        .m_axi_wvalid(wr_wvalid[1]),
        .m_axi_wready(wr_wready[1]),
        .m_axi_bid(wr_bid[1]),
        .m_axi_bresp(wr_bresp[2 +: 2]),
        .m_axi_bvalid(wr_bvalid[1]),
        .m_axi_bready(wr_bready[1]),
        .mr_cmd_valid(mr_cmd_valid),
        .mr_cmd_ready(mr_cmd_ready),
        .mr_cmd_op(mr_cmd_op),
        .mr_cmd_index(mr_cmd_index),
        .mr_cmd_data(mr_cmd_data),
        .wq_cfg_valid(wq_cfg_valid),
        .wq_cfg_qpn(wq_cfg_qpn),
        .wq_cfg_enable(wq_cfg_enable),
        .wq_cfg_base(wq_cfg_base),
        .wq_cfg_log_size(wq_cfg_log_size),
        .wq_cfg_log_stride(wq_cfg_log_stride),
        .wq_cfg_index(wq_cfg_index),
        .cq_cfg_valid(cq_cfg_valid),
        .cq_cfg_cqn(cq_cfg_cqn),
        .cq_cfg_enable(cq_cfg_enable),
        .cq_cfg_base(cq_cfg_base),
        .cq_cfg_log_size(cq_cfg_log_size),
        .cq_cfg_index(cq_cfg_index),
        .cq_hold(cq_hold),
        .cq_busy(cq_busy),
        .cq_pi(cq_pi),
        .bind_valid(bind_valid),
        .bind_cq(bind_cq),
        .bind_num(bind_num),
        .bind_uar(bind_uar),
        .dma_idle(dma_idle),
        .port_up(port_up),
        .port_speed_mbps(port_speed_mbps),
        .dp_err_valid(qp_err_valid),
        .dp_err_ready(qp_err_ready),
        .dp_err_qpn(qp_err_qpn),
        .dp_ctx_qpn(dp_ctx_qpn),
        .dp_ctx_word(dp_ctx_word),
        .dp_ctx_data(dp_ctx_data),
        .dp2_ctx_qpn(dp2_ctx_qpn),
        .dp2_ctx_word(dp2_ctx_word),
        .dp2_ctx_data(dp2_ctx_data),
        .sq_psn_set_valid(sq_psn_set_valid),
        .sq_psn_set_qpn(sq_psn_set_qpn),
        .rq_psn_set_valid(rq_psn_set_valid),
        .rq_psn_set_qpn(rq_psn_set_qpn),
        .cq_overrun_valid(cq_overrun_valid),
        .cq_overrun_cqn(cq_overrun_cqn),
        .cnt_cmds(cnt_cmds),
        .cnt_errors(cnt_cmd_errors)
    );

    // ---------------------------------------------------------------- translation
    // lookup port shared by roce_req (source 0), roce_resp (source 1) and mr_req_* (source
    // 2): the source with lookups in flight keeps the port until all are answered (responses
    // come in order); otherwise the lowest source asking gets it
    wire         xl_req_valid;
    wire         xl_req_ready;
    wire [31:0]  xl_req_key;
    wire [31:0]  xl_req_pd;
    wire [7:0]   xl_req_access;
    wire [63:0]  xl_req_va;
    wire [31:0]  xl_req_len;
    wire [TAG_WIDTH-1:0] xl_req_tag;
    wire         xl_rsp_valid;
    wire         xl_rsp_ready;
    wire         q_req_valid;
    wire         q_req_ready;
    wire [31:0]  q_req_key;
    wire [31:0]  q_req_pd;
    wire [7:0]   q_req_access;
    wire [63:0]  q_req_va;
    wire [31:0]  q_req_len;
    wire [TAG_WIDTH-1:0] q_req_tag;
    wire         q_rsp_ready;
    wire         r_req_valid;
    wire         r_req_ready;
    wire [31:0]  r_req_key;
    wire [31:0]  r_req_pd;
    wire [7:0]   r_req_access;
    wire [63:0]  r_req_va;
    wire [31:0]  r_req_len;
    wire [TAG_WIDTH-1:0] r_req_tag;
    wire         r_rsp_ready;
    reg  [1:0]   xl_own;
    reg  [7:0]   xl_inflight;     // lookups of the owner not fully answered
    wire [1:0]   xl_pick = q_req_valid ? 2'd0 : r_req_valid ? 2'd1 : 2'd2;
    wire [1:0]   xl_sel = xl_inflight != 8'd0 ? xl_own : xl_pick;
    assign xl_req_valid = xl_sel == 2'd0 ? q_req_valid : xl_sel == 2'd1 ? r_req_valid :
                          mr_req_valid;
    assign xl_req_key = xl_sel == 2'd0 ? q_req_key : xl_sel == 2'd1 ? r_req_key : mr_req_key;
    assign xl_req_pd = xl_sel == 2'd0 ? q_req_pd : xl_sel == 2'd1 ? r_req_pd : mr_req_pd;
    assign xl_req_access = xl_sel == 2'd0 ? q_req_access : xl_sel == 2'd1 ? r_req_access :
                           mr_req_access;
    assign xl_req_va = xl_sel == 2'd0 ? q_req_va : xl_sel == 2'd1 ? r_req_va : mr_req_va;
    assign xl_req_len = xl_sel == 2'd0 ? q_req_len : xl_sel == 2'd1 ? r_req_len : mr_req_len;
    assign xl_req_tag = xl_sel == 2'd0 ? q_req_tag : xl_sel == 2'd1 ? r_req_tag : mr_req_tag;
    assign q_req_ready = xl_sel == 2'd0 && xl_req_ready;
    assign r_req_ready = xl_sel == 2'd1 && xl_req_ready;
    assign mr_req_ready = xl_sel == 2'd2 && xl_req_ready;
    assign xl_rsp_ready = xl_own == 2'd0 ? q_rsp_ready : xl_own == 2'd1 ? r_rsp_ready :
                          mr_rsp_ready;
    wire q_rsp_valid = xl_own == 2'd0 && xl_rsp_valid;
    wire r_rsp_valid = xl_own == 2'd1 && xl_rsp_valid;
    assign mr_rsp_valid = xl_own == 2'd2 && xl_rsp_valid;
    wire xl_req_fire = xl_req_valid && xl_req_ready;
    wire xl_done = xl_rsp_valid && xl_rsp_ready && mr_rsp_last;
    always @(posedge clk) begin
        if (rst) begin
            xl_own <= 2'd0;
            xl_inflight <= 8'd0;
        end else begin
            if (xl_req_fire)
                xl_own <= xl_sel;
            xl_inflight <= xl_inflight + {7'd0, xl_req_fire} - {7'd0, xl_done};
        end
    end

    mr_translate #(
        .MPT_DEPTH(MPT_DEPTH),
        .MTT_DEPTH(MTT_DEPTH),
        .TAG_WIDTH(TAG_WIDTH),
        .PA_WIDTH(AW),
        .LEN_WIDTH(32)
    ) u_xlate (
        .clk(clk),
        .rst(rst),
        .cmd_valid(mr_cmd_valid),
        .cmd_ready(mr_cmd_ready),
        .cmd_op(mr_cmd_op),
        .cmd_index(mr_cmd_index),
        .cmd_data(mr_cmd_data),
        .req_valid(xl_req_valid),
        .req_ready(xl_req_ready),
        .req_key(xl_req_key),
        .req_pd(xl_req_pd),
        .req_access(xl_req_access),
        .req_va(xl_req_va),
        .req_len(xl_req_len),
        .req_tag(xl_req_tag),
        .rsp_valid(xl_rsp_valid),
        .rsp_ready(xl_rsp_ready),
        .rsp_status(mr_rsp_status),
        .rsp_pa(mr_rsp_pa),
        .rsp_len(mr_rsp_len),
        .rsp_last(mr_rsp_last),
        .rsp_tag(mr_rsp_tag)
    );

    // ---------------------------------------------------------------- WQE fetch
    wire                 m_wqe_valid;
    wire                 m_wqe_ready;
    wire [23:0]          m_wqe_qpn;
    wire [15:0]          m_wqe_index;
    wire [7:0]           m_wqe_opcode;
    wire [7:0]           m_wqe_flags;
    wire [7:0]           m_wqe_num_sge;
    wire [31:0]          m_wqe_imm_inv;
    wire [63:0]          m_wqe_remote_addr;
    wire [31:0]          m_wqe_rkey;
    wire [31:0]          m_wqe_inline_len;
    wire [63:0]          m_wqe_compare_add;
    wire [63:0]          m_wqe_swap;
    wire [31:0]          m_wqe_dest_qpn;
    wire [31:0]          m_wqe_qkey;
    wire [MAX_SGE*64-1:0] m_wqe_sge_addr;
    wire [MAX_SGE*32-1:0] m_wqe_sge_len;
    wire [MAX_SGE*32-1:0] m_wqe_sge_lkey;
    wire                 m_wqe_err;

    wqe_fetch #(
        .AXI_DATA_WIDTH(DW),
        .AXI_ADDR_WIDTH(AW),
        .AXI_ID_WIDTH(1),
        .NUM_QP(NUM_QP),
        .QPN_WIDTH(QPN_W),
        .MAX_SGE(MAX_SGE),
        .OUTSTANDING(WQE_OUTSTANDING)
    ) u_wqe (
        .clk(clk),
        .rst(rst),
        .cfg_valid(wq_cfg_valid),
        .cfg_qpn(wq_cfg_qpn),
        .cfg_enable(wq_cfg_enable),
        .cfg_base(wq_cfg_base),
        .cfg_log_size(wq_cfg_log_size),
        .cfg_log_stride(wq_cfg_log_stride),
        .cfg_index(wq_cfg_index),
        .db_valid(db_valid && !db_rq),
        .db_qpn(db_qpn),
        .db_pi(db_pi),
        .rw_valid(fetch_rw_valid),
        .rw_qpn(fetch_rw_qpn),
        .rw_index(fetch_rw_index),
        .sq_ci(sq_ci),
        .m_axi_arid(rd_arid[0]),
        .m_axi_araddr(rd_araddr[0 +: AW]),
        .m_axi_arlen(rd_arlen[0 +: 8]),
        .m_axi_arsize(rd_arsize[0 +: 3]),
        .m_axi_arburst(rd_arburst[0 +: 2]),
        .m_axi_arlock(rd_arlock[0]),
        .m_axi_arcache(rd_arcache[0 +: 4]),
        .m_axi_arprot(rd_arprot[0 +: 3]),
        .m_axi_arvalid(rd_arvalid[0]),
        .m_axi_arready(rd_arready[0]),
        .m_axi_rid(rd_rid[0]),
        .m_axi_rdata(rd_rdata[0 +: DW]),
        .m_axi_rresp(rd_rresp[0 +: 2]),
        .m_axi_rlast(rd_rlast[0]),
        .m_axi_rvalid(rd_rvalid[0]),
        .m_axi_rready(rd_rready[0]),
        .m_wqe_valid(m_wqe_valid),
        .m_wqe_ready(m_wqe_ready),
        .m_wqe_qpn(m_wqe_qpn),
        .m_wqe_index(m_wqe_index),
        .m_wqe_opcode(m_wqe_opcode),
        .m_wqe_flags(m_wqe_flags),
        .m_wqe_num_sge(m_wqe_num_sge),
        .m_wqe_imm_inv(m_wqe_imm_inv),
        .m_wqe_remote_addr(m_wqe_remote_addr),
        .m_wqe_rkey(m_wqe_rkey),
        .m_wqe_inline_len(m_wqe_inline_len),
        .m_wqe_compare_add(m_wqe_compare_add),
        .m_wqe_swap(m_wqe_swap),
        .m_wqe_dest_qpn(m_wqe_dest_qpn),
        .m_wqe_qkey(m_wqe_qkey),
        .m_wqe_sge_addr(m_wqe_sge_addr),
        .m_wqe_sge_len(m_wqe_sge_len),
        .m_wqe_sge_lkey(m_wqe_sge_lkey),
        .m_wqe_err(m_wqe_err)
    );

    // ---------------------------------------------------------------- requester
    wire         q_cqe_valid;
    wire         q_cqe_ready;
    wire [CQN_W-1:0] q_cqe_cqn;
    wire [31:0]  q_cqe_qpn;
    wire [15:0]  q_cqe_wqe_index;
    wire [7:0]   q_cqe_opcode;
    wire [7:0]   q_cqe_status;
    wire [7:0]   q_cqe_vendor_err;
    wire         q_cqe_fail;
    wire         rw_valid;
    wire         rw_ready;
    wire [QPN_W-1:0] rw_qpn;
    wire [15:0]  rw_index;
    wire [23:0]  rw_first_psn;
    wire [23:0]  rw_psn;
    wire         fetch_rw_valid;
    wire [QPN_W-1:0] fetch_rw_qpn;
    wire [15:0]  fetch_rw_index;
    wire [NUM_QP-1:0] qp_full;
    wire         st_valid;
    wire         st_new;
    wire [QPN_W-1:0] st_qpn;
    wire [15:0]  st_index;
    wire [23:0]  st_first_psn;
    wire [23:0]  st_last_psn;
    wire [2:0]   st_opcode;
    wire         st_signaled;
    wire [31:0]  st_length;
    wire [CQN_W-1:0] st_cqn;
    wire [4:0]   st_timeout;
    wire [2:0]   st_retry_cnt;
    wire [2:0]   st_rnr_retry;
    wire [3:0]   st_mtu_log;
    wire [NUM_QP-1:0] rd_out;
    wire         rd_sge_valid;
    wire [QPN_W-1:0] rd_sge_qpn;
    wire [31:0]  rd_sge_pd;
    wire [MAX_SGE*64-1:0] rd_sge_addr;
    wire [MAX_SGE*32-1:0] rd_sge_len;
    wire [MAX_SGE*32-1:0] rd_sge_lkey;
    wire         pl_valid;
    wire         pl_ready;
    wire [QPN_W-1:0] pl_qpn;
    wire         pl_drop;
    wire [31:0]  pl_off;
    wire [15:0]  pl_len;
    wire         pl_atomic;
    wire [63:0]  pl_data;
    wire         plr_valid;
    wire         plr_ok;
    wire         k_cqe_valid;
    wire         k_cqe_ready;
    wire [CQN_W-1:0] k_cqe_cqn;
    wire [31:0]  k_cqe_qpn;
    wire [15:0]  k_cqe_wqe_index;
    wire [7:0]   k_cqe_opcode;
    wire [7:0]   k_cqe_status;
    wire [31:0]  k_cqe_byte_len;
    wire [7:0]   k_cqe_vendor_err;
    wire         rsp_valid;
    wire         rsp_ready;
    wire [QPN_W-1:0] rsp_qpn;
    wire [7:0]   rsp_opcode;
    wire [23:0]  rsp_psn;
    wire [7:0]   rsp_syndrome;

    wire         tx_hdr_valid;
    wire         tx_hdr_ready;
    wire [47:0]  tx_hdr_dmac;
    wire [47:0]  tx_hdr_smac;
    wire         tx_hdr_ipv6;
    wire [127:0] tx_hdr_sip;
    wire [127:0] tx_hdr_dip;
    wire [7:0]   tx_hdr_tos;
    wire [7:0]   tx_hdr_ttl;
    wire [15:0]  tx_hdr_udp_sport;
    wire [7:0]   tx_hdr_opcode;
    wire         tx_hdr_solicited;
    wire [23:0]  tx_hdr_dqpn;
    wire         tx_hdr_ackreq;
    wire [23:0]  tx_hdr_psn;
    wire [63:0]  tx_hdr_reth_va;
    wire [31:0]  tx_hdr_reth_rkey;
    wire [31:0]  tx_hdr_reth_len;
    wire [31:0]  tx_hdr_imm;
    wire [63:0]  tx_hdr_atomic_swap_add;
    wire [63:0]  tx_hdr_atomic_compare;
    wire [15:0]  tx_hdr_payload_len;
    wire [DW-1:0] tx_pay_tdata;
    wire [SW-1:0] tx_pay_tkeep;
    wire         tx_pay_tvalid;
    wire         tx_pay_tready;
    wire         tx_pay_tlast;
    wire         tx_pay_tuser;

    wire [31:0]  req_stale;
    roce_req #(
        .DATA_WIDTH(DW),
        .ADDR_WIDTH(AW),
        .NUM_QP(NUM_QP),
        .QPN_WIDTH(QPN_W),
        .CQN_WIDTH(CQN_W),
        .MAX_SGE(MAX_SGE),
        .TAG_WIDTH(TAG_WIDTH),
        .PAY_DEPTH(PAY_DEPTH_B),
        .META_DEPTH(16)
    ) u_req (
        .clk(clk),
        .rst(rst),
        .s_wqe_valid(m_wqe_valid),
        .s_wqe_ready(m_wqe_ready),
        .s_wqe_qpn(m_wqe_qpn),
        .s_wqe_index(m_wqe_index),
        .s_wqe_opcode(m_wqe_opcode),
        .s_wqe_flags(m_wqe_flags),
        .s_wqe_num_sge(m_wqe_num_sge),
        .s_wqe_imm_inv(m_wqe_imm_inv),
        .s_wqe_remote_addr(m_wqe_remote_addr),
        .s_wqe_rkey(m_wqe_rkey),
        .s_wqe_compare_add(m_wqe_compare_add),
        .s_wqe_swap(m_wqe_swap),
        .s_wqe_sge_addr(m_wqe_sge_addr),
        .s_wqe_sge_len(m_wqe_sge_len),
        .s_wqe_sge_lkey(m_wqe_sge_lkey),
        .s_wqe_err(m_wqe_err),
        .ctx_qpn(dp_ctx_qpn),
        .ctx_word(dp_ctx_word),
        .ctx_data(dp_ctx_data),
        .ctx_idle(qp_err_ready),     // nic_cmd idle: the QP table is not being written
        .sq_psn_set_valid(sq_psn_set_valid),
        .sq_psn_set_qpn(sq_psn_set_qpn),
        .wq_cfg_valid(wq_cfg_valid),
        .wq_cfg_qpn(wq_cfg_qpn),
        .rw_valid(rw_valid),
        .rw_ready(rw_ready),
        .rw_qpn(rw_qpn),
        .rw_index(rw_index),
        .rw_first_psn(rw_first_psn),
        .rw_psn(rw_psn),
        .fetch_rw_valid(fetch_rw_valid),
        .fetch_rw_qpn(fetch_rw_qpn),
        .fetch_rw_index(fetch_rw_index),
        .qp_full(qp_full),
        .st_valid(st_valid),
        .st_new(st_new),
        .st_qpn(st_qpn),
        .st_index(st_index),
        .st_first_psn(st_first_psn),
        .st_last_psn(st_last_psn),
        .st_opcode(st_opcode),
        .st_signaled(st_signaled),
        .st_length(st_length),
        .st_cqn(st_cqn),
        .st_timeout(st_timeout),
        .st_retry_cnt(st_retry_cnt),
        .st_rnr_retry(st_rnr_retry),
        .st_mtu_log(st_mtu_log),
        .rd_out(rd_out),
        .rd_sge_valid(rd_sge_valid),
        .rd_sge_qpn(rd_sge_qpn),
        .rd_sge_pd(rd_sge_pd),
        .rd_sge_addr(rd_sge_addr),
        .rd_sge_len(rd_sge_len),
        .rd_sge_lkey(rd_sge_lkey),
        .mr_req_valid(q_req_valid),
        .mr_req_ready(q_req_ready),
        .mr_req_key(q_req_key),
        .mr_req_pd(q_req_pd),
        .mr_req_access(q_req_access),
        .mr_req_va(q_req_va),
        .mr_req_len(q_req_len),
        .mr_req_tag(q_req_tag),
        .mr_rsp_valid(q_rsp_valid),
        .mr_rsp_ready(q_rsp_ready),
        .mr_rsp_status(mr_rsp_status),
        .mr_rsp_pa(mr_rsp_pa),
        .mr_rsp_len(mr_rsp_len),
        .mr_rsp_last(mr_rsp_last),
        .m_axi_araddr(rd_araddr[2*AW +: AW]),
        .m_axi_arlen(rd_arlen[16 +: 8]),
        .m_axi_arsize(rd_arsize[6 +: 3]),
        .m_axi_arburst(rd_arburst[4 +: 2]),
        .m_axi_arvalid(rd_arvalid[2]),
        .m_axi_arready(rd_arready[2]),
        .m_axi_rdata(rd_rdata[2*DW +: DW]),
        .m_axi_rresp(rd_rresp[4 +: 2]),
        .m_axi_rlast(rd_rlast[2]),
        .m_axi_rvalid(rd_rvalid[2]),
        .m_axi_rready(rd_rready[2]),
        .tx_hdr_valid(tx_hdr_valid),
        .tx_hdr_ready(tx_hdr_ready),
        .tx_hdr_dmac(tx_hdr_dmac),
        .tx_hdr_smac(tx_hdr_smac),
        .tx_hdr_ipv6(tx_hdr_ipv6),
        .tx_hdr_sip(tx_hdr_sip),
        .tx_hdr_dip(tx_hdr_dip),
        .tx_hdr_tos(tx_hdr_tos),
        .tx_hdr_ttl(tx_hdr_ttl),
        .tx_hdr_udp_sport(tx_hdr_udp_sport),
        .tx_hdr_opcode(tx_hdr_opcode),
        .tx_hdr_solicited(tx_hdr_solicited),
        .tx_hdr_dqpn(tx_hdr_dqpn),
        .tx_hdr_ackreq(tx_hdr_ackreq),
        .tx_hdr_psn(tx_hdr_psn),
        .tx_hdr_reth_va(tx_hdr_reth_va),
        .tx_hdr_reth_rkey(tx_hdr_reth_rkey),
        .tx_hdr_reth_len(tx_hdr_reth_len),
        .tx_hdr_imm(tx_hdr_imm),
        .tx_hdr_atomic_swap_add(tx_hdr_atomic_swap_add),
        .tx_hdr_atomic_compare(tx_hdr_atomic_compare),
        .tx_hdr_payload_len(tx_hdr_payload_len),
        .tx_pay_tdata(tx_pay_tdata),
        .tx_pay_tkeep(tx_pay_tkeep),
        .tx_pay_tvalid(tx_pay_tvalid),
        .tx_pay_tready(tx_pay_tready),
        .tx_pay_tlast(tx_pay_tlast),
        .tx_pay_tuser(tx_pay_tuser),
        .m_cqe_valid(q_cqe_valid),
        .m_cqe_ready(q_cqe_ready),
        .m_cqe_cqn(q_cqe_cqn),
        .m_cqe_qpn(q_cqe_qpn),
        .m_cqe_wqe_index(q_cqe_wqe_index),
        .m_cqe_opcode(q_cqe_opcode),
        .m_cqe_status(q_cqe_status),
        .m_cqe_vendor_err(q_cqe_vendor_err),
        .m_cqe_fail(q_cqe_fail),
        .cnt_wqes(cnt_req_wqes),
        .cnt_pkts(cnt_req_pkts),
        .cnt_bytes(cnt_req_bytes),
        .cnt_errors(cnt_req_errors),
        .cnt_resent(cnt_req_resent),
        .cnt_stale(req_stale)
    );
    assign rd_arid[2] = 1'b0;
    assign rd_arlock[2] = 1'b0;
    assign rd_arcache[8 +: 4] = 4'b0011;
    assign rd_arprot[6 +: 3] = 3'b010;

    // ---------------------------------------------------------------- transmit framer + ICRC
    // descriptors: the responder's (ACKs, NAKs, READ responses) go first, between the
    // requester's packets; each payload stream follows its descriptors, in order (u_tx_owner)
    wire         ak_valid;
    wire         ak_ready;
    wire [47:0]  ak_dmac;
    wire [47:0]  ak_smac;
    wire         ak_ipv6;
    wire [127:0] ak_sip;
    wire [127:0] ak_dip;
    wire [7:0]   ak_tos;
    wire [7:0]   ak_ttl;
    wire [15:0]  ak_udp_sport;
    wire [23:0]  ak_dqpn;
    wire [23:0]  ak_psn;
    wire [7:0]   ak_syndrome;
    wire [23:0]  ak_msn;
    wire [7:0]   ak_opcode;
    wire [15:0]  ak_payload_len;
    wire [63:0]  ak_orig;       // ATOMIC ACKNOWLEDGE: the original value (AtomicAckETH)
    wire [DW-1:0] rr_tdata;
    wire [SW-1:0] rr_tkeep;
    wire         rr_tvalid;
    wire         rr_tready;
    wire         rr_tlast;
    wire         rr_tuser;
    wire         tx_ak = ak_valid;
    wire         fr_hdr_ready;
    wire         fr_hdr_fire;
    // payload owner of each descriptor with a payload, in order: 1 the responder (READ
    // responses), 0 the requester
    wire         to_head;
    wire         to_valid;
    wire         to_ready;
    wire [15:0]  to_count;
    wire         fr_pay_tvalid;
    wire         fr_pay_tready;
    wire         fr_pay_tlast;
    wire [15:0]  fr_plen = tx_ak ? ak_payload_len : tx_hdr_payload_len;
    assign ak_ready = fr_hdr_ready && to_ready;
    assign tx_hdr_ready = !tx_ak && fr_hdr_ready && to_ready;
    assign fr_hdr_fire = (tx_ak || tx_hdr_valid) && fr_hdr_ready && to_ready;
    fifo_fwft #(
        .WIDTH(1),
        .DEPTH(16)
    ) u_tx_owner (
        .clk(clk),
        .rst(rst),
        .s_data(tx_ak),
        .s_valid(fr_hdr_fire && fr_plen != 16'd0),
        .s_ready(to_ready),
        .m_data(to_head),
        .m_valid(to_valid),
        .m_ready(fr_pay_tvalid && fr_pay_tready && fr_pay_tlast),
        .count(to_count)
    );
    assign fr_pay_tvalid = to_valid && (to_head ? rr_tvalid : tx_pay_tvalid);
    assign fr_pay_tlast = to_head ? rr_tlast : tx_pay_tlast;
    assign rr_tready = to_valid && to_head && fr_pay_tready;
    assign tx_pay_tready = to_valid && !to_head && fr_pay_tready;

    // transmit frame FIFO: store and forward to the MAC
    wire [DW-1:0] txf_tdata;
    wire [SW-1:0] txf_tkeep;
    wire          txf_tvalid, txf_tready, txf_tlast, txf_tuser;
    wire [31:0]   txf_drops;  // (frames longer than the FIFO: roce_tx makes none)

    roce_tx #(
        .DATA_WIDTH(DW)
    ) u_tx (
        .clk(clk),
        .rst(rst),
        .s_hdr_valid((tx_ak || tx_hdr_valid) && to_ready),
        .s_hdr_ready(fr_hdr_ready),
        .s_hdr_dmac(tx_ak ? ak_dmac : tx_hdr_dmac),
        .s_hdr_smac(tx_ak ? ak_smac : tx_hdr_smac),
        .s_hdr_ipv6(tx_ak ? ak_ipv6 : tx_hdr_ipv6),
        .s_hdr_sip(tx_ak ? ak_sip : tx_hdr_sip),
        .s_hdr_dip(tx_ak ? ak_dip : tx_hdr_dip),
        .s_hdr_tos(tx_ak ? ak_tos : tx_hdr_tos),
        .s_hdr_ttl(tx_ak ? ak_ttl : tx_hdr_ttl),
        .s_hdr_flow_label(20'd0),
        .s_hdr_udp_sport(tx_ak ? ak_udp_sport : tx_hdr_udp_sport),
        .s_hdr_opcode(tx_ak ? ak_opcode : tx_hdr_opcode),
        .s_hdr_solicited(!tx_ak && tx_hdr_solicited),
        .s_hdr_migreq(1'b1),
        .s_hdr_pkey(16'hffff),
        .s_hdr_fecn(1'b0),
        .s_hdr_becn(1'b0),
        .s_hdr_dqpn(tx_ak ? ak_dqpn : tx_hdr_dqpn),
        .s_hdr_ackreq(!tx_ak && tx_hdr_ackreq),
        .s_hdr_psn(tx_ak ? ak_psn : tx_hdr_psn),
        .s_hdr_reth_va(tx_hdr_reth_va),
        .s_hdr_reth_rkey(tx_hdr_reth_rkey),
        .s_hdr_reth_len(tx_hdr_reth_len),
        .s_hdr_aeth_syndrome(ak_syndrome),
        .s_hdr_aeth_msn(ak_msn),
        .s_hdr_imm(tx_hdr_imm),
        .s_hdr_ieth_rkey(32'd0),
        .s_hdr_atomic_va(tx_hdr_reth_va),     // (only the requester sends 0x13, 0x14)
        .s_hdr_atomic_rkey(tx_hdr_reth_rkey),
        .s_hdr_atomic_swap_add(tx_hdr_atomic_swap_add),
        .s_hdr_atomic_compare(tx_hdr_atomic_compare),
        .s_hdr_atomic_orig(ak_orig),          // (only the responder sends 0x12)
        .s_hdr_deth_qkey(32'd0),
        .s_hdr_deth_src_qp(24'd0),
        .s_hdr_payload_len(fr_plen),
        .s_axis_tdata(to_head ? rr_tdata : tx_pay_tdata),
        .s_axis_tkeep(to_head ? rr_tkeep : tx_pay_tkeep),
        .s_axis_tvalid(fr_pay_tvalid),
        .s_axis_tready(fr_pay_tready),
        .s_axis_tlast(fr_pay_tlast),
        .s_axis_tuser(to_head ? rr_tuser : tx_pay_tuser),
        .m_axis_tdata(txf_tdata),
        .m_axis_tkeep(txf_tkeep),
        .m_axis_tvalid(txf_tvalid),
        .m_axis_tready(txf_tready),
        .m_axis_tlast(txf_tlast),
        .m_axis_tuser(txf_tuser)
    );

`ifdef BUG_TX_CUT_THROUGH
    // A test-only bug (hdl_tb/test_cosim.py): no transmit FIFO, the framer's frames go to the
    // MAC as it makes them, with the gaps of the DMA's stalls in them.
    assign m_axis_tx_tdata = txf_tdata;
    assign m_axis_tx_tkeep = txf_tkeep;
    assign m_axis_tx_tvalid = txf_tvalid;
    assign txf_tready = m_axis_tx_tready;
    assign m_axis_tx_tlast = txf_tlast;
    assign m_axis_tx_tuser = txf_tuser;
`else
    axis_frame_fifo #(
        .DATA_WIDTH(DW),
        .DEPTH(MAC_FIFO_B),
        .DROP_WHEN_FULL(0)
    ) u_tx_fifo (
        .clk(clk),
        .rst(rst),
        .s_axis_tdata(txf_tdata),
        .s_axis_tkeep(txf_tkeep),
        .s_axis_tvalid(txf_tvalid),
        .s_axis_tready(txf_tready),
        .s_axis_tlast(txf_tlast),
        .s_axis_tuser(txf_tuser),
        .m_axis_tdata(m_axis_tx_tdata),
        .m_axis_tkeep(m_axis_tx_tkeep),
        .m_axis_tvalid(m_axis_tx_tvalid),
        .m_axis_tready(m_axis_tx_tready),
        .m_axis_tlast(m_axis_tx_tlast),
        .m_axis_tuser(m_axis_tx_tuser),
        .drops(txf_drops)
    );
`endif

    // ---------------------------------------------------------------- completer
    roce_comp #(
        .NUM_QP(NUM_QP),
        .QPN_WIDTH(QPN_W),
        .CQN_WIDTH(CQN_W),
        .OUT(SQ_OUT),
        .CLK_NS_LOG2(CLK_NS_LOG2)
    ) u_comp (
        .clk(clk),
        .rst(rst),
        .s_rsp_valid(rsp_valid),
        .s_rsp_ready(rsp_ready),
        .s_rsp_qpn(rsp_qpn),
        .s_rsp_opcode(rsp_opcode),
        .s_rsp_psn(rsp_psn),
        .s_rsp_syndrome(rsp_syndrome),
        .s_rsp_payload_len(rxm_payload_len),
        .s_rsp_padcount(rxm_padcount),
        .s_rsp_orig(rxm_atomic_orig),
        .st_valid(st_valid),
        .st_new(st_new),
        .st_qpn(st_qpn),
        .st_index(st_index),
        .st_first_psn(st_first_psn),
        .st_last_psn(st_last_psn),
        .st_opcode(st_opcode),
        .st_signaled(st_signaled),
        .st_length(st_length),
        .st_cqn(st_cqn),
        .st_timeout(st_timeout),
        .st_retry_cnt(st_retry_cnt),
        .st_rnr_retry(st_rnr_retry),
        .st_mtu_log(st_mtu_log),
        .rd_out(rd_out),
        .pl_valid(pl_valid),
        .pl_ready(pl_ready),
        .pl_qpn(pl_qpn),
        .pl_drop(pl_drop),
        .pl_off(pl_off),
        .pl_len(pl_len),
        .pl_atomic(pl_atomic),
        .pl_data(pl_data),
        .plr_valid(plr_valid),
        .plr_ok(plr_ok),
        .lc_valid(q_cqe_valid),
        .lc_ready(q_cqe_ready),
        .lc_fail(q_cqe_fail),
        .lc_cqn(q_cqe_cqn),
        .lc_qpn(q_cqe_qpn[QPN_W-1:0]),
        .lc_index(q_cqe_wqe_index),
        .lc_opcode(q_cqe_opcode),
        .lc_status(q_cqe_status),
        .lc_vendor(q_cqe_vendor_err),
        .xf_valid(rs_fail_valid),
        .xf_ready(rs_fail_ready),
        .xf_qpn(rs_fail_qpn),
        .rw_valid(rw_valid),
        .rw_ready(rw_ready),
        .rw_qpn(rw_qpn),
        .rw_index(rw_index),
        .rw_first_psn(rw_first_psn),
        .rw_psn(rw_psn),
        .qp_full(qp_full),
        .cfg_valid(wq_cfg_valid),
        .cfg_qpn(wq_cfg_qpn),
        .m_cqe_valid(k_cqe_valid),
        .m_cqe_ready(k_cqe_ready),
        .m_cqe_cqn(k_cqe_cqn),
        .m_cqe_qpn(k_cqe_qpn),
        .m_cqe_wqe_index(k_cqe_wqe_index),
        .m_cqe_opcode(k_cqe_opcode),
        .m_cqe_status(k_cqe_status),
        .m_cqe_byte_len(k_cqe_byte_len),
        .m_cqe_vendor_err(k_cqe_vendor_err),
        .qp_err_valid(qp_err_valid),
        .qp_err_ready(qp_err_ready),
        .qp_err_qpn(qp_err_qpn),
        .cnt_acks(cnt_comp_acks),
        .cnt_naks(cnt_comp_naks),
        .cnt_timeouts(cnt_comp_timeouts),
        .cnt_resends(cnt_comp_resends),
        .cnt_cqes(cnt_comp_cqes),
        .cnt_unexpected(cnt_comp_unexpected)
    );

    // ---------------------------------------------------------------- receive
    // roce_rx (ICRC check, parse) -> requests to the responder, responses to the completer;
    // packets for another MAC or QP, other transports and non-RoCE frames are dropped. The
    // payload of a packet goes where its metadata went (a small FIFO says whose it is).
    wire         rxm_valid;
    wire         rxm_ready;
    wire [47:0]  rxm_dmac;
    wire [7:0]   rxm_opcode;
    wire [23:0]  rxm_dqpn;
    wire [23:0]  rxm_psn;
    wire [7:0]   rxm_syndrome;
    wire         rxm_ackreq;
    wire [1:0]   rxm_padcount;
    wire [15:0]  rxm_payload_len;
    wire [63:0]  rxm_reth_va;
    wire [31:0]  rxm_reth_rkey;
    wire [31:0]  rxm_reth_len;
    wire [31:0]  rxm_imm;
    wire [31:0]  rxm_ieth;
    wire         rxm_ipv6;
    wire [127:0] rxm_sip;
    wire [127:0] rxm_dip;
    wire [15:0]  rxm_pkey;
    wire [63:0]  rxm_atomic_va;
    wire [31:0]  rxm_atomic_rkey;
    wire [63:0]  rxm_atomic_swap_add;
    wire [63:0]  rxm_atomic_compare;
    wire [63:0]  rxm_atomic_orig;
    wire [DW-1:0] rxp_tdata;
    wire [SW-1:0] rxp_tkeep;
    wire         rxp_tvalid;
    wire         rxp_tready;
    wire         rxp_tlast;
    wire [31:0]  rx_stat_packets;
    wire [31:0]  rx_stat_drops;
    wire         rx_is_rsp = rxm_opcode >= 8'h0d && rxm_opcode <= 8'h12;
    wire         rx_is_req = rxm_opcode <= 8'h0c || rxm_opcode == 8'h13 ||
                             rxm_opcode == 8'h14 || rxm_opcode == 8'h16 ||
                             rxm_opcode == 8'h17;
    wire         rx_ours = rxm_dmac == mac_addr && {8'd0, rxm_dqpn} < NUM_QP;
    wire         to_comp = rx_is_rsp && rx_ours;
    wire         to_resp = rx_is_req && rx_ours;
    wire         rq_valid;
    wire         rq_ready;
    wire         pr_ready;      // the payload owner FIFO has room
    assign rsp_valid = rxm_valid && to_comp && pr_ready;
    assign rsp_qpn = rxm_dqpn;
    assign rsp_opcode = rxm_opcode;
    assign rsp_psn = rxm_psn;
    assign rsp_syndrome = rxm_syndrome;
    // a READ response's payload is placed by the responder's write engine on the completer's
    // word: requests wait until the READ response payloads before them are gone (the payload
    // stream is in packet order)
    wire         rx_rdrsp = rxm_opcode >= 8'h0d && rxm_opcode <= 8'h10;
    reg  [4:0]   rr_pend;       // READ response payloads in the stream, not yet taken
    assign rq_valid = rxm_valid && to_resp && pr_ready && rr_pend == 5'd0;
    assign rxm_ready = pr_ready && (to_comp ? rsp_ready : to_resp ? rq_ready && rr_pend == 5'd0
                                                                  : 1'b1);
    wire rxm_take = rxm_valid && rxm_ready;
    // payload owner of each packet with a payload: 1 the responder (requests), 2 the
    // responder on the completer's word (READ responses), 0 dropped
    wire [1:0]   pr_head;
    wire         pr_valid;
    wire [15:0]  pr_count;
    fifo_fwft #(
        .WIDTH(2),
        .DEPTH(16)
    ) u_pay_owner (
        .clk(clk),
        .rst(rst),
        .s_data(to_resp ? 2'd1 : (to_comp && rx_rdrsp) ? 2'd2 : 2'd0),
        .s_valid(rxm_take && rxm_payload_len != 16'd0),
        .s_ready(pr_ready),
        .m_data(pr_head),
        .m_valid(pr_valid),
        .m_ready(rxp_tvalid && rxp_tready && rxp_tlast),
        .count(pr_count)
    );
    wire         rsp_pay_tready;
    assign rxp_tready = pr_valid && (pr_head != 2'd0 ? rsp_pay_tready : 1'b1);
    wire rr_push = rxm_take && to_comp && rx_rdrsp && rxm_payload_len != 16'd0;
    wire rr_pop = rxp_tvalid && rxp_tready && rxp_tlast && pr_head == 2'd2;
    reg  [31:0]  rx_dropped;
    always @(posedge clk) begin
        if (rst) begin
            rx_dropped <= 32'd0;
            rr_pend <= 5'd0;
        end else begin
            if (rxm_take && !to_comp && !to_resp)
                rx_dropped <= rx_dropped + 32'd1;
            rr_pend <= rr_pend + {4'd0, rr_push} - {4'd0, rr_pop};
        end
    end
    assign cnt_rx_packets = rx_stat_packets;
    assign cnt_rx_drops = rx_dropped + rx_stat_drops;

    // receive frame FIFO: takes every beat the MAC sends; drops whole frames that find no room
    wire [DW-1:0] rxf_tdata;
    wire [SW-1:0] rxf_tkeep;
    wire          rxf_tvalid, rxf_tready, rxf_tlast, rxf_tuser;

    axis_frame_fifo #(
        .DATA_WIDTH(DW),
        .DEPTH(MAC_FIFO_B),
        .DROP_WHEN_FULL(1)
    ) u_rx_fifo (
        .clk(clk),
        .rst(rst),
        .s_axis_tdata(s_axis_rx_tdata),
        .s_axis_tkeep(s_axis_rx_tkeep),
        .s_axis_tvalid(s_axis_rx_tvalid),
        .s_axis_tready(s_axis_rx_tready),
        .s_axis_tlast(s_axis_rx_tlast),
        .s_axis_tuser(s_axis_rx_tuser),
        .m_axis_tdata(rxf_tdata),
        .m_axis_tkeep(rxf_tkeep),
        .m_axis_tvalid(rxf_tvalid),
        .m_axis_tready(rxf_tready),
        .m_axis_tlast(rxf_tlast),
        .m_axis_tuser(rxf_tuser),
        .drops(cnt_rx_fifo_drops)
    );

    wire          rxm_solicited;  // (a receive CQE's solicited event: no EQs yet)
    wire [23:0]   rxm_aeth_msn;   // (the completer takes the MSN from roce_rx's own path)
    roce_nic_rx #(
        .DATA_WIDTH(DW)
    ) u_rx (
        .clk(clk),
        .rst(rst),
        .s_axis_tdata(rxf_tdata),
        .s_axis_tkeep(rxf_tkeep),
        .s_axis_tvalid(rxf_tvalid),
        .s_axis_tready(rxf_tready),
        .s_axis_tlast(rxf_tlast),
        .s_axis_tuser(rxf_tuser),
        .m_meta_valid(rxm_valid),
        .m_meta_ready(rxm_ready),
        .m_meta_dmac(rxm_dmac),
        .m_meta_opcode(rxm_opcode),
        .m_meta_padcount(rxm_padcount),
        .m_meta_dqpn(rxm_dqpn),
        .m_meta_solicited(rxm_solicited),
        .m_meta_aeth_msn(rxm_aeth_msn),
        .m_meta_ackreq(rxm_ackreq),
        .m_meta_psn(rxm_psn),
        .m_meta_payload_len(rxm_payload_len),
        .m_meta_reth_va(rxm_reth_va),
        .m_meta_reth_rkey(rxm_reth_rkey),
        .m_meta_reth_len(rxm_reth_len),
        .m_meta_aeth_syndrome(rxm_syndrome),
        .m_meta_imm(rxm_imm),
        .m_meta_ieth_rkey(rxm_ieth),
        .m_meta_ipv6(rxm_ipv6),
        .m_meta_sip(rxm_sip),
        .m_meta_dip(rxm_dip),
        .m_meta_pkey(rxm_pkey),
        .m_meta_atomic_va(rxm_atomic_va),
        .m_meta_atomic_rkey(rxm_atomic_rkey),
        .m_meta_atomic_swap_add(rxm_atomic_swap_add),
        .m_meta_atomic_compare(rxm_atomic_compare),
        .m_meta_atomic_orig(rxm_atomic_orig),
        .m_axis_tdata(rxp_tdata),
        .m_axis_tkeep(rxp_tkeep),
        .m_axis_tvalid(rxp_tvalid),
        .m_axis_tready(rxp_tready),
        .m_axis_tlast(rxp_tlast),
        .stat_packets(rx_stat_packets),
        .stat_drops(rx_stat_drops)
    );

    // ---------------------------------------------------------------- responder
    wire         rs_fail_valid;
    wire         rs_fail_ready;
    wire [QPN_W-1:0] rs_fail_qpn;
    wire         r_cqe_valid;
    wire         r_cqe_ready;
    wire [CQN_W-1:0] r_cqe_cqn;
    wire [31:0]  r_cqe_qpn;
    wire [15:0]  r_cqe_wqe_index;
    wire [7:0]   r_cqe_opcode;
    wire [7:0]   r_cqe_status;
    wire [31:0]  r_cqe_byte_len;
    wire [31:0]  r_cqe_imm;
    wire [7:0]   r_cqe_flags;
    wire [7:0]   r_cqe_vendor_err;

    roce_resp #(
        .DATA_WIDTH(DW),
        .ADDR_WIDTH(AW),
        .NUM_QP(NUM_QP),
        .QPN_WIDTH(QPN_W),
        .CQN_WIDTH(CQN_W),
        .TAG_WIDTH(TAG_WIDTH),
        .MAX_RSGE(MAX_SGE),
        .RD_DEPTH(RD_DEPTH_B)
    ) u_resp (
        .clk(clk),
        .rst(rst),
        .s_req_valid(rq_valid),
        .s_req_ready(rq_ready),
        .s_req_qpn(rxm_dqpn),
        .s_req_opcode(rxm_opcode),
        .s_req_psn(rxm_psn),
        .s_req_ackreq(rxm_ackreq),
        .s_req_padcount(rxm_padcount),
        .s_req_payload_len(rxm_payload_len),
        .s_req_reth_va(rxm_reth_va),
        .s_req_reth_rkey(rxm_reth_rkey),
        .s_req_reth_len(rxm_reth_len),
        .s_req_imm(rxm_imm),
        .s_req_ieth(rxm_ieth),
        .s_req_ipv6(rxm_ipv6),
        .s_req_sip(rxm_sip),
        .s_req_dip(rxm_dip),
        .s_req_pkey(rxm_pkey),
        .s_req_atomic_va(rxm_atomic_va),
        .s_req_atomic_rkey(rxm_atomic_rkey),
        .s_req_atomic_swap_add(rxm_atomic_swap_add),
        .s_req_atomic_compare(rxm_atomic_compare),
        .s_pay_tdata(rxp_tdata),
        .s_pay_tkeep(rxp_tkeep),
        .s_pay_tvalid(rxp_tvalid && pr_valid && pr_head != 2'd0),
        .s_pay_tready(rsp_pay_tready),
        .s_pay_tlast(rxp_tlast),
        .ctx_qpn(dp2_ctx_qpn),
        .ctx_word(dp2_ctx_word),
        .ctx_data(dp2_ctx_data),
        .rq_psn_set_valid(rq_psn_set_valid),
        .rq_psn_set_qpn(rq_psn_set_qpn),
        .rq_db_valid(db_valid && db_rq),
        .rq_db_qpn(db_qpn),
        .rq_db_pi(db_pi),
        .cfg_valid(wq_cfg_valid),
        .cfg_qpn(wq_cfg_qpn),
        .mr_req_valid(r_req_valid),
        .mr_req_ready(r_req_ready),
        .mr_req_key(r_req_key),
        .mr_req_pd(r_req_pd),
        .mr_req_access(r_req_access),
        .mr_req_va(r_req_va),
        .mr_req_len(r_req_len),
        .mr_req_tag(r_req_tag),
        .mr_rsp_valid(r_rsp_valid),
        .mr_rsp_ready(r_rsp_ready),
        .mr_rsp_status(mr_rsp_status),
        .mr_rsp_pa(mr_rsp_pa),
        .mr_rsp_len(mr_rsp_len),
        .mr_rsp_last(mr_rsp_last),
        .m_axi_araddr(rd_araddr[3*AW +: AW]),
        .m_axi_arlen(rd_arlen[24 +: 8]),
        .m_axi_arsize(rd_arsize[9 +: 3]),
        .m_axi_arburst(rd_arburst[6 +: 2]),
        .m_axi_arvalid(rd_arvalid[3]),
        .m_axi_arready(rd_arready[3]),
        .m_axi_rdata(rd_rdata[3*DW +: DW]),
        .m_axi_rresp(rd_rresp[6 +: 2]),
        .m_axi_rlast(rd_rlast[3]),
        .m_axi_rvalid(rd_rvalid[3]),
        .m_axi_rready(rd_rready[3]),
        .m_axi_awaddr(wr_awaddr[2*AW +: AW]),
        .m_axi_awlen(wr_awlen[16 +: 8]),
        .m_axi_awsize(wr_awsize[6 +: 3]),
        .m_axi_awburst(wr_awburst[4 +: 2]),
        .m_axi_awvalid(wr_awvalid[2]),
        .m_axi_awready(wr_awready[2]),
        .m_axi_wdata(wr_wdata[2*DW +: DW]),
        .m_axi_wstrb(wr_wstrb[2*SW +: SW]),
        .m_axi_wlast(wr_wlast[2]),
        .m_axi_wvalid(wr_wvalid[2]),
        .m_axi_wready(wr_wready[2]),
        .m_axi_bresp(wr_bresp[4 +: 2]),
        .m_axi_bvalid(wr_bvalid[2]),
        .m_axi_bready(wr_bready[2]),
        .ack_valid(ak_valid),
        .ack_ready(ak_ready),
        .ack_dmac(ak_dmac),
        .ack_smac(ak_smac),
        .ack_ipv6(ak_ipv6),
        .ack_sip(ak_sip),
        .ack_dip(ak_dip),
        .ack_tos(ak_tos),
        .ack_ttl(ak_ttl),
        .ack_udp_sport(ak_udp_sport),
        .ack_dqpn(ak_dqpn),
        .ack_psn(ak_psn),
        .ack_syndrome(ak_syndrome),
        .ack_msn(ak_msn),
        .ack_opcode(ak_opcode),
        .ack_payload_len(ak_payload_len),
        .ack_orig(ak_orig),
        .m_rd_tdata(rr_tdata),
        .m_rd_tkeep(rr_tkeep),
        .m_rd_tvalid(rr_tvalid),
        .m_rd_tready(rr_tready),
        .m_rd_tlast(rr_tlast),
        .m_rd_tuser(rr_tuser),
        .m_cqe_valid(r_cqe_valid),
        .m_cqe_ready(r_cqe_ready),
        .m_cqe_cqn(r_cqe_cqn),
        .m_cqe_qpn(r_cqe_qpn),
        .m_cqe_wqe_index(r_cqe_wqe_index),
        .m_cqe_opcode(r_cqe_opcode),
        .m_cqe_status(r_cqe_status),
        .m_cqe_byte_len(r_cqe_byte_len),
        .m_cqe_imm(r_cqe_imm),
        .m_cqe_flags(r_cqe_flags),
        .m_cqe_vendor_err(r_cqe_vendor_err),
        .fail_valid(rs_fail_valid),
        .fail_ready(rs_fail_ready),
        .fail_qpn(rs_fail_qpn),
        .rd_sge_valid(rd_sge_valid),
        .rd_sge_qpn(rd_sge_qpn),
        .rd_sge_pd(rd_sge_pd),
        .rd_sge_addr(rd_sge_addr),
        .rd_sge_len(rd_sge_len),
        .rd_sge_lkey(rd_sge_lkey),
        .pl_valid(pl_valid),
        .pl_ready(pl_ready),
        .pl_qpn(pl_qpn),
        .pl_drop(pl_drop),
        .pl_off(pl_off),
        .pl_len(pl_len),
        .pl_atomic(pl_atomic),
        .pl_data(pl_data),
        .plr_valid(plr_valid),
        .plr_ok(plr_ok),
        .cnt_requests(cnt_resp_requests),
        .cnt_bytes(cnt_resp_bytes),
        .cnt_acks(cnt_resp_acks),
        .cnt_naks(cnt_resp_naks),
        .cnt_duplicates(cnt_resp_duplicates),
        .cnt_dropped(cnt_resp_dropped),
        .cnt_atomics(cnt_resp_atomics)
    );
    assign rd_arid[3] = 1'b0;
    assign rd_arlock[3] = 1'b0;
    assign rd_arcache[12 +: 4] = 4'b0011;
    assign rd_arprot[9 +: 3] = 3'b010;
    assign wr_awid[2] = 1'b0;
    assign wr_awlock[2] = 1'b0;
    assign wr_awcache[8 +: 4] = 4'b0011;
    assign wr_awprot[6 +: 3] = 3'b010;

    // ---------------------------------------------------------------- CQE writeback
    // completions from the completer first (the requester's go through it), then s_cqe_*
    // (responder's receive completions next)
    wire         c_k = k_cqe_valid;
    wire         c_r = !k_cqe_valid && r_cqe_valid;
    wire         c_sel = !k_cqe_valid && !r_cqe_valid;
    wire         c_valid = k_cqe_valid || r_cqe_valid || s_cqe_valid;
    wire         c_ready;
    assign k_cqe_ready = c_ready;
    assign r_cqe_ready = c_r && c_ready;
    assign s_cqe_ready = c_sel && c_ready;

    cqe_write #(
        .AXI_DATA_WIDTH(DW),
        .AXI_ADDR_WIDTH(AW),
        .AXI_ID_WIDTH(1),
        .NUM_CQ(NUM_CQ),
        .CQN_WIDTH(CQN_W),
        .OUTSTANDING(CQE_OUTSTANDING)
    ) u_cqe (
        .clk(clk),
        .rst(rst),
        .cfg_valid(cq_cfg_valid),
        .cfg_cqn(cq_cfg_cqn),
        .cfg_enable(cq_cfg_enable),
        .cfg_base(cq_cfg_base),
        .cfg_log_size(cq_cfg_log_size),
        .cfg_index(cq_cfg_index),
        .hold(cq_hold),
        .busy(cq_busy),
        .s_cqe_valid(c_valid),
        .s_cqe_ready(c_ready),
        .s_cqe_cqn(c_k ? k_cqe_cqn : c_r ? r_cqe_cqn : s_cqe_cqn),
        .s_cqe_qpn(c_k ? k_cqe_qpn : c_r ? r_cqe_qpn : s_cqe_qpn),
        .s_cqe_wqe_index(c_k ? k_cqe_wqe_index : c_r ? r_cqe_wqe_index : s_cqe_wqe_index),
        .s_cqe_opcode(c_k ? k_cqe_opcode : c_r ? r_cqe_opcode : s_cqe_opcode),
        .s_cqe_status(c_k ? k_cqe_status : c_r ? r_cqe_status : s_cqe_status),
        .s_cqe_byte_len(c_k ? k_cqe_byte_len : c_r ? r_cqe_byte_len : s_cqe_byte_len),
        .s_cqe_imm_inv(c_k ? 32'd0 : c_r ? r_cqe_imm : s_cqe_imm_inv),
        .s_cqe_src_qp(c_sel ? s_cqe_src_qp : 32'd0),
        .s_cqe_flags(c_k ? 8'd0 : c_r ? r_cqe_flags : s_cqe_flags),
        .s_cqe_vendor_err(c_k ? k_cqe_vendor_err : c_r ? r_cqe_vendor_err : s_cqe_vendor_err),
        .cq_pi(cq_pi),
        .wr_error(cqe_wr_error),
        .m_axi_awid(wr_awid[0]),
        .m_axi_awaddr(wr_awaddr[0 +: AW]),
        .m_axi_awlen(wr_awlen[0 +: 8]),
        .m_axi_awsize(wr_awsize[0 +: 3]),
        .m_axi_awburst(wr_awburst[0 +: 2]),
        .m_axi_awlock(wr_awlock[0]),
        .m_axi_awcache(wr_awcache[0 +: 4]),
        .m_axi_awprot(wr_awprot[0 +: 3]),
        .m_axi_awvalid(wr_awvalid[0]),
        .m_axi_awready(wr_awready[0]),
        .m_axi_wdata(wr_wdata[0 +: DW]),
        .m_axi_wstrb(wr_wstrb[0 +: SW]),
        .m_axi_wlast(wr_wlast[0]),
        .m_axi_wvalid(wr_wvalid[0]),
        .m_axi_wready(wr_wready[0]),
        .m_axi_bid(wr_bid[0]),
        .m_axi_bresp(wr_bresp[0 +: 2]),
        .m_axi_bvalid(wr_bvalid[0]),
        .m_axi_bready(wr_bready[0])
    );

    // ---------------------------------------------------------------- DMA arbitration
    axi_rd_arb #(
        .PORTS(4),
        .DATA_WIDTH(DW),
        .ADDR_WIDTH(AW),
        .S_ID_WIDTH(1),
        .M_ID_WIDTH(AXI_ID_WIDTH)
    ) u_rd_arb (
        .clk(clk),
        .rst(rst),
        .s_axi_arid(rd_arid),
        .s_axi_araddr(rd_araddr),
        .s_axi_arlen(rd_arlen),
        .s_axi_arsize(rd_arsize),
        .s_axi_arburst(rd_arburst),
        .s_axi_arlock(rd_arlock),
        .s_axi_arcache(rd_arcache),
        .s_axi_arprot(rd_arprot),
        .s_axi_arvalid(rd_arvalid),
        .s_axi_arready(rd_arready),
        .s_axi_rid(rd_rid),
        .s_axi_rdata(rd_rdata),
        .s_axi_rresp(rd_rresp),
        .s_axi_rlast(rd_rlast),
        .s_axi_rvalid(rd_rvalid),
        .s_axi_rready(rd_rready),
        .m_axi_arid(m_axi_arid),
        .m_axi_araddr(m_axi_araddr),
        .m_axi_arlen(m_axi_arlen),
        .m_axi_arsize(m_axi_arsize),
        .m_axi_arburst(m_axi_arburst),
        .m_axi_arlock(m_axi_arlock),
        .m_axi_arcache(m_axi_arcache),
        .m_axi_arprot(m_axi_arprot),
        .m_axi_arvalid(m_axi_arvalid),
        .m_axi_arready(m_axi_arready),
        .m_axi_rid(m_axi_rid),
        .m_axi_rdata(m_axi_rdata),
        .m_axi_rresp(m_axi_rresp),
        .m_axi_rlast(m_axi_rlast),
        .m_axi_rvalid(m_axi_rvalid),
        .m_axi_rready(m_axi_rready)
    );

    axi_wr_arb #(
        .PORTS(3),
        .DATA_WIDTH(DW),
        .ADDR_WIDTH(AW),
        .S_ID_WIDTH(1),
        .M_ID_WIDTH(AXI_ID_WIDTH),
        .CNT_WIDTH(8)
    ) u_wr_arb (
        .clk(clk),
        .rst(rst),
        .s_axi_awid(wr_awid),
        .s_axi_awaddr(wr_awaddr),
        .s_axi_awlen(wr_awlen),
        .s_axi_awsize(wr_awsize),
        .s_axi_awburst(wr_awburst),
        .s_axi_awlock(wr_awlock),
        .s_axi_awcache(wr_awcache),
        .s_axi_awprot(wr_awprot),
        .s_axi_awvalid(wr_awvalid),
        .s_axi_awready(wr_awready),
        .s_axi_wdata(wr_wdata),
        .s_axi_wstrb(wr_wstrb),
        .s_axi_wlast(wr_wlast),
        .s_axi_wvalid(wr_wvalid),
        .s_axi_wready(wr_wready),
        .s_axi_bid(wr_bid),
        .s_axi_bresp(wr_bresp),
        .s_axi_bvalid(wr_bvalid),
        .s_axi_bready(wr_bready),
        .m_axi_awid(m_axi_awid),
        .m_axi_awaddr(m_axi_awaddr),
        .m_axi_awlen(m_axi_awlen),
        .m_axi_awsize(m_axi_awsize),
        .m_axi_awburst(m_axi_awburst),
        .m_axi_awlock(m_axi_awlock),
        .m_axi_awcache(m_axi_awcache),
        .m_axi_awprot(m_axi_awprot),
        .m_axi_awvalid(m_axi_awvalid),
        .m_axi_awready(m_axi_awready),
        .m_axi_wdata(m_axi_wdata),
        .m_axi_wstrb(m_axi_wstrb),
        .m_axi_wlast(m_axi_wlast),
        .m_axi_wvalid(m_axi_wvalid),
        .m_axi_wready(m_axi_wready),
        .m_axi_bid(m_axi_bid),
        .m_axi_bresp(m_axi_bresp),
        .m_axi_bvalid(m_axi_bvalid),
        .m_axi_bready(m_axi_bready),
        .idle(dma_idle)
    );

    // Not used: the requester's stale-WQE count (not a counter port yet), the ID bits the
    // arbiters add above each unit's (the units issue ID 0), WQE fields of transports the
    // requester does not do (UD's dest QPN and Q_Key, inline data), the QPN bits above a
    // CQE's 24, FIFO fill levels, and frames longer than the transmit FIFO (none are made).
    /* verilator lint_off UNUSEDSIGNAL */
    wire unused = &{1'b0, req_stale, rd_rid, wr_bid, m_wqe_inline_len, m_wqe_dest_qpn,
                    m_wqe_qkey, q_cqe_qpn, to_count, pr_count, txf_drops, rxm_solicited,
                    rxm_aeth_msn};
    /* verilator lint_on UNUSEDSIGNAL */

    // Protocol checkers on the ports (simulation only: nic_common.vh, axis_check.v)
    `NIC_CHECK_AXIL_SLAVE("roce_nic BAR0", AXIL_ADDR_WIDTH, AXIL_DATA_WIDTH)
    `NIC_CHECK_AXI_MASTER("roce_nic DMA", AXI_ID_WIDTH, AXI_ADDR_WIDTH, AXI_DATA_WIDTH)
`ifndef SYNTHESIS
    axis_check #(.DATA_WIDTH(AXI_DATA_WIDTH), .NAME("roce_nic tx")) chk_tx (
        .clk(clk), .rst(rst), .tdata(m_axis_tx_tdata), .tkeep(m_axis_tx_tkeep),
        .tvalid(m_axis_tx_tvalid), .tready(m_axis_tx_tready), .tlast(m_axis_tx_tlast),
        .tuser(m_axis_tx_tuser));
    axis_check #(.DATA_WIDTH(AXI_DATA_WIDTH), .NAME("roce_nic rx")) chk_rx (
        .clk(clk), .rst(rst), .tdata(s_axis_rx_tdata), .tkeep(s_axis_rx_tkeep),
        .tvalid(s_axis_rx_tvalid), .tready(s_axis_rx_tready), .tlast(s_axis_rx_tlast),
        .tuser(s_axis_rx_tuser));
`endif

endmodule
`default_nettype wire
