`default_nettype none
// roce_nic: the nsnic RoCEv2 NIC (nicsim.hwif), as far as it is built: the host interface
// (BAR0 over AXI4-Lite), the command processor with the QP/CQ context tables, address
// translation (MPT/MTT), SQ WQE fetch and CQE writeback, sharing one AXI4 master to host
// memory. The unchanged nicsim kernel driver programs it (hdl_tb/test_roce_nic_cmd.py).
//
//   AXI4-Lite --> nic_bar --cmd--> nic_cmd --mr cmd--> mr_translate <-- mr_req/mr_rsp
//                  |  ^bind          |  |--wq cfg--> wqe_fetch --> m_wqe (decoded WQEs)
//                  |                 |  '--cq cfg--> cqe_write <-- s_cqe (completions)
//                  |--SQ doorbells-----------------> wqe_fetch
//                  '--doorbell / arm events --> db_*, arm_* (for the engines to come)
//   DMA: reads  wqe_fetch (port 0), nic_cmd (port 1) --> axi_rd_arb --> m_axi (AR/R)
//        writes cqe_write (port 0), nic_cmd (port 1) --> axi_wr_arb --> m_axi (AW/W/B)
//
// AXI IDs: the units issue ID 0; the arbiters append the port index in the low bit, so
// m_axi_arid/awid = port (0: wqe_fetch / cqe_write, 1: nic_cmd). Each unit's requests are
// in order among themselves (one ID per unit); the slave may reorder between units.
// Fence: nic_cmd's dma_idle is the write arbiter's idle (no AW pending or in flight, no B
// outstanding): INVALIDATE_MPT, DESTROY_QP and DESTROY_CQ complete only after every
// CQE write issued before them has its B response. The engines to come that write host
// memory must join the write arbiter (or this idle) for the fence to cover them.
// wqe_fetch gets a QP's SQ when the QP enters RTS from RTR (index 0) and loses it at RESET
// and destroy; SQ doorbells before that are dropped by wqe_fetch (the provider posts sends
// only in RTS; its indexes restart at 0 after RESET). RQ doorbells and CQ arms are only
// reported on db_* / arm_* for now; INT_STATUS has no source yet (no EQs).
//
// Parameters:
//   AXI_DATA_WIDTH   DMA data width (64..1024, a power of two)
//   AXI_ADDR_WIDTH   DMA address width (<= 64)
//   AXI_ID_WIDTH     DMA ID width (>= 2)
//   AXIL_ADDR_WIDTH  BAR0 address width (>= 12 + clog2(MAX_UAR + 1))
//   NUM_QP, NUM_CQ   QP / CQ contexts (powers of two, >= 2)
//   MPT_DEPTH, MTT_DEPTH   translation tables (powers of two)
//   MAX_UAR, MAX_QP_WR, MAX_SGE, MAX_CQE, MAX_QP_RD_ATOM, MAX_INLINE   QUERY_DEVICE
//                    capacities (MAX_SGE is also the SGEs wqe_fetch decodes)
//   WQE_OUTSTANDING, CQE_OUTSTANDING   bursts in flight in wqe_fetch / cqe_write
//   TAG_WIDTH        mr_translate request tag width
//
// Ports:
//   clk, rst                    clock, synchronous active-high reset
//   s_axil_*                    BAR0 (AXI4-Lite slave, 64-bit data; see nic_bar.v)
//   m_axi_*                     DMA (AXI4 master)
//   db_valid, db_rq, db_qpn, db_pi, arm_valid, arm_cqn, arm_solicited   accepted doorbells
//   m_wqe_*                     decoded send WQEs (wqe_fetch.v)
//   sq_ci[NUM_QP*16-1:0]        wqe_fetch fetch indexes
//   s_cqe_*                     completions to write (cqe_write.v)
//   cq_pi[NUM_CQ*32-1:0], cqe_wr_error   cqe_write producer indexes, sticky write error
//   cq_overrun_valid, cq_overrun_cqn     a CQ overran (QUERY_CQ reports OVERRUN; cqe_write
//                               does not detect a full CQ yet, the engine that does drives it)
//   mr_req_*, mr_rsp_*          translation lookups (mr_translate.v)
//   cnt_db_sq, cnt_db_rq, cnt_arm, cnt_db_drop, cnt_cmds, cnt_cmd_errors   counters
module roce_nic #(
    parameter AXI_DATA_WIDTH = 64,
    parameter AXI_ADDR_WIDTH = 64,
    parameter AXI_ID_WIDTH = 4,
    parameter AXIL_ADDR_WIDTH = 23,
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
    parameter WQE_OUTSTANDING = 4,
    parameter CQE_OUTSTANDING = 4,
    parameter TAG_WIDTH = 8
) (
    input  wire                          clk,
    input  wire                          rst,

    input  wire [AXIL_ADDR_WIDTH-1:0]    s_axil_awaddr,
    input  wire [2:0]                    s_axil_awprot,
    input  wire                          s_axil_awvalid,
    output wire                          s_axil_awready,
    input  wire [63:0]                   s_axil_wdata,
    input  wire [7:0]                    s_axil_wstrb,
    input  wire                          s_axil_wvalid,
    output wire                          s_axil_wready,
    output wire [1:0]                    s_axil_bresp,
    output wire                          s_axil_bvalid,
    input  wire                          s_axil_bready,
    input  wire [AXIL_ADDR_WIDTH-1:0]    s_axil_araddr,
    input  wire [2:0]                    s_axil_arprot,
    input  wire                          s_axil_arvalid,
    output wire                          s_axil_arready,
    output wire [63:0]                   s_axil_rdata,
    output wire [1:0]                    s_axil_rresp,
    output wire                          s_axil_rvalid,
    input  wire                          s_axil_rready,

    output wire [AXI_ID_WIDTH-1:0]       m_axi_awid,
    output wire [AXI_ADDR_WIDTH-1:0]     m_axi_awaddr,
    output wire [7:0]                    m_axi_awlen,
    output wire [2:0]                    m_axi_awsize,
    output wire [1:0]                    m_axi_awburst,
    output wire                          m_axi_awlock,
    output wire [3:0]                    m_axi_awcache,
    output wire [2:0]                    m_axi_awprot,
    output wire                          m_axi_awvalid,
    input  wire                          m_axi_awready,
    output wire [AXI_DATA_WIDTH-1:0]     m_axi_wdata,
    output wire [AXI_DATA_WIDTH/8-1:0]   m_axi_wstrb,
    output wire                          m_axi_wlast,
    output wire                          m_axi_wvalid,
    input  wire                          m_axi_wready,
    input  wire [AXI_ID_WIDTH-1:0]       m_axi_bid,
    input  wire [1:0]                    m_axi_bresp,
    input  wire                          m_axi_bvalid,
    output wire                          m_axi_bready,
    output wire [AXI_ID_WIDTH-1:0]       m_axi_arid,
    output wire [AXI_ADDR_WIDTH-1:0]     m_axi_araddr,
    output wire [7:0]                    m_axi_arlen,
    output wire [2:0]                    m_axi_arsize,
    output wire [1:0]                    m_axi_arburst,
    output wire                          m_axi_arlock,
    output wire [3:0]                    m_axi_arcache,
    output wire [2:0]                    m_axi_arprot,
    output wire                          m_axi_arvalid,
    input  wire                          m_axi_arready,
    input  wire [AXI_ID_WIDTH-1:0]       m_axi_rid,
    input  wire [AXI_DATA_WIDTH-1:0]     m_axi_rdata,
    input  wire [1:0]                    m_axi_rresp,
    input  wire                          m_axi_rlast,
    input  wire                          m_axi_rvalid,
    output wire                          m_axi_rready,

    output wire                          db_valid,
    output wire                          db_rq,
    output wire [23:0]                   db_qpn,
    output wire [15:0]                   db_pi,
    output wire                          arm_valid,
    output wire [23:0]                   arm_cqn,
    output wire                          arm_solicited,

    output wire                          m_wqe_valid,
    input  wire                          m_wqe_ready,
    output wire [23:0]                   m_wqe_qpn,
    output wire [15:0]                   m_wqe_index,
    output wire [7:0]                    m_wqe_opcode,
    output wire [7:0]                    m_wqe_flags,
    output wire [7:0]                    m_wqe_num_sge,
    output wire [31:0]                   m_wqe_imm_inv,
    output wire [63:0]                   m_wqe_remote_addr,
    output wire [31:0]                   m_wqe_rkey,
    output wire [31:0]                   m_wqe_inline_len,
    output wire [63:0]                   m_wqe_compare_add,
    output wire [63:0]                   m_wqe_swap,
    output wire [31:0]                   m_wqe_dest_qpn,
    output wire [31:0]                   m_wqe_qkey,
    output wire [MAX_SGE*64-1:0]         m_wqe_sge_addr,
    output wire [MAX_SGE*32-1:0]         m_wqe_sge_len,
    output wire [MAX_SGE*32-1:0]         m_wqe_sge_lkey,
    output wire                          m_wqe_err,
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
    output wire [31:0]                   cnt_cmd_errors
);

    localparam DW = AXI_DATA_WIDTH;
    localparam AW = AXI_ADDR_WIDTH;
    localparam SW = DW / 8;
    localparam QPN_W = 24;
    localparam CQN_W = 24;

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
    // read port 0: wqe_fetch, 1: nic_cmd; write port 0: cqe_write, 1: nic_cmd
    wire [1:0]    rd_arid;
    wire [2*AW-1:0] rd_araddr;
    wire [15:0]   rd_arlen;
    wire [5:0]    rd_arsize;
    wire [3:0]    rd_arburst;
    wire [1:0]    rd_arlock;
    wire [7:0]    rd_arcache;
    wire [5:0]    rd_arprot;
    wire [1:0]    rd_arvalid;
    wire [1:0]    rd_arready;
    wire [1:0]    rd_rid;
    wire [2*DW-1:0] rd_rdata;
    wire [3:0]    rd_rresp;
    wire [1:0]    rd_rlast;
    wire [1:0]    rd_rvalid;
    wire [1:0]    rd_rready;

    wire [1:0]    wr_awid;
    wire [2*AW-1:0] wr_awaddr;
    wire [15:0]   wr_awlen;
    wire [5:0]    wr_awsize;
    wire [3:0]    wr_awburst;
    wire [1:0]    wr_awlock;
    wire [7:0]    wr_awcache;
    wire [5:0]    wr_awprot;
    wire [1:0]    wr_awvalid;
    wire [1:0]    wr_awready;
    wire [2*DW-1:0] wr_wdata;
    wire [2*SW-1:0] wr_wstrb;
    wire [1:0]    wr_wlast;
    wire [1:0]    wr_wvalid;
    wire [1:0]    wr_wready;
    wire [1:0]    wr_bid;
    wire [3:0]    wr_bresp;
    wire [1:0]    wr_bvalid;
    wire [1:0]    wr_bready;
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
    wire         cq_cfg_valid;
    wire [CQN_W-1:0] cq_cfg_cqn;
    wire         cq_cfg_enable;
    wire [AW-1:0] cq_cfg_base;
    wire [4:0]   cq_cfg_log_size;

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
        .bind_valid(bind_valid),
        .bind_cq(bind_cq),
        .bind_num(bind_num),
        .bind_uar(bind_uar),
        .dma_idle(dma_idle),
        .cq_overrun_valid(cq_overrun_valid),
        .cq_overrun_cqn(cq_overrun_cqn),
        .cnt_cmds(cnt_cmds),
        .cnt_errors(cnt_cmd_errors)
    );

    // ---------------------------------------------------------------- translation
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
        .req_valid(mr_req_valid),
        .req_ready(mr_req_ready),
        .req_key(mr_req_key),
        .req_pd(mr_req_pd),
        .req_access(mr_req_access),
        .req_va(mr_req_va),
        .req_len(mr_req_len),
        .req_tag(mr_req_tag),
        .rsp_valid(mr_rsp_valid),
        .rsp_ready(mr_rsp_ready),
        .rsp_status(mr_rsp_status),
        .rsp_pa(mr_rsp_pa),
        .rsp_len(mr_rsp_len),
        .rsp_last(mr_rsp_last),
        .rsp_tag(mr_rsp_tag)
    );

    // ---------------------------------------------------------------- WQE fetch
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

    // ---------------------------------------------------------------- CQE writeback
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
        .s_cqe_valid(s_cqe_valid),
        .s_cqe_ready(s_cqe_ready),
        .s_cqe_cqn(s_cqe_cqn),
        .s_cqe_qpn(s_cqe_qpn),
        .s_cqe_wqe_index(s_cqe_wqe_index),
        .s_cqe_opcode(s_cqe_opcode),
        .s_cqe_status(s_cqe_status),
        .s_cqe_byte_len(s_cqe_byte_len),
        .s_cqe_imm_inv(s_cqe_imm_inv),
        .s_cqe_src_qp(s_cqe_src_qp),
        .s_cqe_flags(s_cqe_flags),
        .s_cqe_vendor_err(s_cqe_vendor_err),
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
        .PORTS(2),
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
        .PORTS(2),
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

endmodule
`default_nettype wire
