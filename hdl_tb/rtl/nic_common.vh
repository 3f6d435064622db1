// nic_common.vh: the pieces the RTL modules share, defined once: the clog2 function and the
// port declarations of the common interfaces (AXI4 master read / write channels, AXI4-Lite
// slave, AXI-Stream, and the RoCE header descriptor, receive metadata and drop counters).
//
// Include it at the top of a file, outside the module:  `include "nic_common.vh"
// (rtl/ is the include directory: nicsim/cosim/build.py passes it to the simulators,
// benchmarks/hdl_synth.py to Yosys with read_verilog -I). It holds only macros, defined once
// per compilation unit (the guard below); nothing in it takes effect until a module uses it.
//
// `NIC_CLOG2_FUNCTION, inside a module body, declares that module's
//     function integer clog2(value): ceil(log2(value)), the bits that index value entries
//     (0 for value <= 1). Verilog-2001 has no functions outside modules, so every module that
//     uses clog2 expands the one definition here.
//
// Port macros: each expands to a comma-separated run of ANSI port declarations with no comma
// after the last one (write `NIC_..._PORTS(...), when more ports follow). Port names are
// fixed (Verilog-2001 macros cannot build names); the arguments give the widths and, where
// named KIND, whether the module's outputs are `wire` or `reg`.
//   `NIC_AXI_RD_MASTER_PORTS(ID_W, ADDR_W, DATA_W)   m_axi_ar*, m_axi_r*: AXI4 read master
//   `NIC_AXI_RD_MASTER_NOID_PORTS(ADDR_W, DATA_W)    the same without ARID/RID, ARLOCK,
//                                   ARCACHE and ARPROT (the parent ties them off)
//   `NIC_AXI_WR_MASTER_PORTS(ID_W, ADDR_W, DATA_W)   m_axi_aw*, m_axi_w*, m_axi_b*: AXI4
//                                   write master (WSTRB is DATA_W/8 bits)
//   `NIC_AXIL_SLAVE_PORTS(ADDR_W, DATA_W)            s_axil_*: AXI4-Lite slave
//   `NIC_AXIS_SLAVE_PORTS(DATA_W, KEEP_W)            s_axis_tdata/tkeep/tvalid/tready/tlast
//   `NIC_AXIS_MASTER_PORTS(KIND, DATA_W, KEEP_W)     m_axis_tdata/tkeep/tvalid/tready/tlast
//                                   (no tuser in either: a module that has one declares it
//                                   after tlast, with its width)
//   `NIC_ROCE_TX_HDR_PORTS          s_hdr_*: the transmit header descriptor (roce_tx_framer.v)
//   `NIC_ROCE_RX_META_PORTS         m_meta_*: a received packet's metadata (roce_rx_parser.v)
//   `NIC_ROCE_RX_STAT_PORTS(KIND)   stat_*: the receive parser's counters (roce_rx_parser.v)
//
// Protocol checkers on those ports (axis_check.v, axi4_check.v, axil_check.v): each macro, in
// a module body after the ports, instantiates one on the ports of that name, and expands to
// nothing in synthesis (Yosys defines SYNTHESIS). LABEL is a string for the messages; PACKED
// (1 or 0) whether the stream's beats must be packed (axis_check's S3).
//   `NIC_CHECK_AXIS_IN(LABEL, DATA_W, KEEP_W, PACKED)     on s_axis_* (no tuser)
//   `NIC_CHECK_AXIS_OUT(LABEL, DATA_W, KEEP_W, PACKED)    on m_axis_* (no tuser)
//   `NIC_CHECK_AXI_MASTER(LABEL, ID_W, ADDR_W, DATA_W)    on m_axi_* (both directions)
//   `NIC_CHECK_AXI_RD_MASTER(LABEL, ID_W, ADDR_W, DATA_W) on m_axi_ar*, m_axi_r*
//   `NIC_CHECK_AXI_RD_MASTER_NOID(LABEL, ADDR_W, DATA_W)  the same without IDs
//   `NIC_CHECK_AXI_WR_MASTER(LABEL, ID_W, ADDR_W, DATA_W) on m_axi_aw*, m_axi_w*, m_axi_b*
//   `NIC_CHECK_AXIL_SLAVE(LABEL, ADDR_W, DATA_W)          on s_axil_*

`ifndef NIC_COMMON_VH
`define NIC_COMMON_VH

`define NIC_CLOG2_FUNCTION \
    function integer clog2; \
        input integer value; \
        integer v; \
        begin \
            clog2 = 0; \
            v = value - 1; \
            while (v > 0) begin \
                clog2 = clog2 + 1; \
                v = v >> 1; \
            end \
        end \
    endfunction

`define NIC_AXI_RD_MASTER_PORTS(ID_W, ADDR_W, DATA_W) \
    output wire [(ID_W)-1:0]         m_axi_arid, \
    output wire [(ADDR_W)-1:0]       m_axi_araddr, \
    output wire [7:0]                m_axi_arlen, \
    output wire [2:0]                m_axi_arsize, \
    output wire [1:0]                m_axi_arburst, \
    output wire                      m_axi_arlock, \
    output wire [3:0]                m_axi_arcache, \
    output wire [2:0]                m_axi_arprot, \
    output wire                      m_axi_arvalid, \
    input  wire                      m_axi_arready, \
    input  wire [(ID_W)-1:0]         m_axi_rid, \
    input  wire [(DATA_W)-1:0]       m_axi_rdata, \
    input  wire [1:0]                m_axi_rresp, \
    input  wire                      m_axi_rlast, \
    input  wire                      m_axi_rvalid, \
    output wire                      m_axi_rready

`define NIC_AXI_RD_MASTER_NOID_PORTS(ADDR_W, DATA_W) \
    output wire [(ADDR_W)-1:0]       m_axi_araddr, \
    output wire [7:0]                m_axi_arlen, \
    output wire [2:0]                m_axi_arsize, \
    output wire [1:0]                m_axi_arburst, \
    output wire                      m_axi_arvalid, \
    input  wire                      m_axi_arready, \
    input  wire [(DATA_W)-1:0]       m_axi_rdata, \
    input  wire [1:0]                m_axi_rresp, \
    input  wire                      m_axi_rlast, \
    input  wire                      m_axi_rvalid, \
    output wire                      m_axi_rready

`define NIC_AXI_WR_MASTER_PORTS(ID_W, ADDR_W, DATA_W) \
    output wire [(ID_W)-1:0]         m_axi_awid, \
    output wire [(ADDR_W)-1:0]       m_axi_awaddr, \
    output wire [7:0]                m_axi_awlen, \
    output wire [2:0]                m_axi_awsize, \
    output wire [1:0]                m_axi_awburst, \
    output wire                      m_axi_awlock, \
    output wire [3:0]                m_axi_awcache, \
    output wire [2:0]                m_axi_awprot, \
    output wire                      m_axi_awvalid, \
    input  wire                      m_axi_awready, \
    output wire [(DATA_W)-1:0]       m_axi_wdata, \
    output wire [(DATA_W)/8-1:0]     m_axi_wstrb, \
    output wire                      m_axi_wlast, \
    output wire                      m_axi_wvalid, \
    input  wire                      m_axi_wready, \
    input  wire [(ID_W)-1:0]         m_axi_bid, \
    input  wire [1:0]                m_axi_bresp, \
    input  wire                      m_axi_bvalid, \
    output wire                      m_axi_bready

`define NIC_AXIL_SLAVE_PORTS(ADDR_W, DATA_W) \
    input  wire [(ADDR_W)-1:0]       s_axil_awaddr, \
    input  wire [2:0]                s_axil_awprot, \
    input  wire                      s_axil_awvalid, \
    output wire                      s_axil_awready, \
    input  wire [(DATA_W)-1:0]       s_axil_wdata, \
    input  wire [(DATA_W)/8-1:0]     s_axil_wstrb, \
    input  wire                      s_axil_wvalid, \
    output wire                      s_axil_wready, \
    output wire [1:0]                s_axil_bresp, \
    output wire                      s_axil_bvalid, \
    input  wire                      s_axil_bready, \
    input  wire [(ADDR_W)-1:0]       s_axil_araddr, \
    input  wire [2:0]                s_axil_arprot, \
    input  wire                      s_axil_arvalid, \
    output wire                      s_axil_arready, \
    output wire [(DATA_W)-1:0]       s_axil_rdata, \
    output wire [1:0]                s_axil_rresp, \
    output wire                      s_axil_rvalid, \
    input  wire                      s_axil_rready

`define NIC_AXIS_SLAVE_PORTS(DATA_W, KEEP_W) \
    input  wire [(DATA_W)-1:0]       s_axis_tdata, \
    input  wire [(KEEP_W)-1:0]       s_axis_tkeep, \
    input  wire                      s_axis_tvalid, \
    output wire                      s_axis_tready, \
    input  wire                      s_axis_tlast

`define NIC_AXIS_MASTER_PORTS(KIND, DATA_W, KEEP_W) \
    output KIND [(DATA_W)-1:0]       m_axis_tdata, \
    output KIND [(KEEP_W)-1:0]       m_axis_tkeep, \
    output KIND                      m_axis_tvalid, \
    input  wire                      m_axis_tready, \
    output KIND                      m_axis_tlast

`define NIC_ROCE_TX_HDR_PORTS \
    input  wire                      s_hdr_valid, \
    output wire                      s_hdr_ready, \
    input  wire [47:0]               s_hdr_dmac, \
    input  wire [47:0]               s_hdr_smac, \
    input  wire                      s_hdr_ipv6, \
    input  wire [127:0]              s_hdr_sip, \
    input  wire [127:0]              s_hdr_dip, \
    input  wire [7:0]                s_hdr_tos, \
    input  wire [7:0]                s_hdr_ttl, \
    input  wire [19:0]               s_hdr_flow_label, \
    input  wire [15:0]               s_hdr_udp_sport, \
    input  wire [7:0]                s_hdr_opcode, \
    input  wire                      s_hdr_solicited, \
    input  wire                      s_hdr_migreq, \
    input  wire [15:0]               s_hdr_pkey, \
    input  wire                      s_hdr_fecn, \
    input  wire                      s_hdr_becn, \
    input  wire [23:0]               s_hdr_dqpn, \
    input  wire                      s_hdr_ackreq, \
    input  wire [23:0]               s_hdr_psn, \
    input  wire [63:0]               s_hdr_reth_va, \
    input  wire [31:0]               s_hdr_reth_rkey, \
    input  wire [31:0]               s_hdr_reth_len, \
    input  wire [7:0]                s_hdr_aeth_syndrome, \
    input  wire [23:0]               s_hdr_aeth_msn, \
    input  wire [31:0]               s_hdr_imm, \
    input  wire [31:0]               s_hdr_ieth_rkey, \
    input  wire [63:0]               s_hdr_atomic_va, \
    input  wire [31:0]               s_hdr_atomic_rkey, \
    input  wire [63:0]               s_hdr_atomic_swap_add, \
    input  wire [63:0]               s_hdr_atomic_compare, \
    input  wire [63:0]               s_hdr_atomic_orig, \
    input  wire [31:0]               s_hdr_deth_qkey, \
    input  wire [23:0]               s_hdr_deth_src_qp, \
    input  wire [15:0]               s_hdr_payload_len

`define NIC_ROCE_RX_META_PORTS \
    output wire                      m_meta_valid, \
    input  wire                      m_meta_ready, \
    output wire [47:0]               m_meta_dmac, \
    output wire [47:0]               m_meta_smac, \
    output wire                      m_meta_ipv6, \
    output wire [127:0]              m_meta_sip, \
    output wire [127:0]              m_meta_dip, \
    output wire [7:0]                m_meta_tos, \
    output wire [15:0]               m_meta_udp_sport, \
    output wire [7:0]                m_meta_opcode, \
    output wire                      m_meta_solicited, \
    output wire                      m_meta_migreq, \
    output wire [1:0]                m_meta_padcount, \
    output wire [15:0]               m_meta_pkey, \
    output wire                      m_meta_fecn, \
    output wire                      m_meta_becn, \
    output wire [23:0]               m_meta_dqpn, \
    output wire                      m_meta_ackreq, \
    output wire [23:0]               m_meta_psn, \
    output wire [9:0]                m_meta_flags, \
    output wire [15:0]               m_meta_payload_len, \
    output wire [63:0]               m_meta_reth_va, \
    output wire [31:0]               m_meta_reth_rkey, \
    output wire [31:0]               m_meta_reth_len, \
    output wire [7:0]                m_meta_aeth_syndrome, \
    output wire [23:0]               m_meta_aeth_msn, \
    output wire [31:0]               m_meta_imm, \
    output wire [31:0]               m_meta_ieth_rkey, \
    output wire [63:0]               m_meta_atomic_va, \
    output wire [31:0]               m_meta_atomic_rkey, \
    output wire [63:0]               m_meta_atomic_swap_add, \
    output wire [63:0]               m_meta_atomic_compare, \
    output wire [63:0]               m_meta_atomic_orig, \
    output wire [31:0]               m_meta_deth_qkey, \
    output wire [23:0]               m_meta_deth_src_qp

`define NIC_ROCE_RX_STAT_PORTS(KIND) \
    output KIND [31:0]               stat_rx_packets, \
    output KIND [31:0]               stat_bypass, \
    output KIND [31:0]               stat_drop_bad_icrc, \
    output KIND [31:0]               stat_drop_truncated, \
    output KIND [31:0]               stat_drop_bad_ip_version, \
    output KIND [31:0]               stat_drop_bad_ip_header, \
    output KIND [31:0]               stat_drop_bad_ip_checksum, \
    output KIND [31:0]               stat_drop_bad_ip_length, \
    output KIND [31:0]               stat_drop_bad_udp_length, \
    output KIND [31:0]               stat_drop_unknown_opcode, \
    output KIND [31:0]               stat_drop_bad_transport_version, \
    output KIND [31:0]               stat_drop_short_headers, \
    output KIND [31:0]               stat_drop_bad_padcount, \
    output KIND [31:0]               stat_drop_oversize

// In a checker (axis_check.v, ...): its violation count `errors` and task fail(what), which
// counts one and stops the simulation ($fatal) unless the checker's FATAL is 0, naming the
// instance, the checker's NAME, PROTOCOL and what broke.
`define NIC_CHECK_FAIL_TASK(PROTOCOL) \
    integer errors; \
    initial errors = 0; \
    task automatic fail(input [8*80-1:0] what); \
        begin \
            errors = errors + 1; \
            if (FATAL != 0) \
                $fatal(1, "%m (%0s): %0s %0s at %0t", NAME, PROTOCOL, what, $time); \
            else \
                $display("%m (%0s): %0s %0s at %0t", NAME, PROTOCOL, what, $time); \
        end \
    endtask

`ifdef SYNTHESIS
`define NIC_CHECK_AXIS_IN(LABEL, DATA_W, KEEP_W, IS_PACKED)
`define NIC_CHECK_AXIS_OUT(LABEL, DATA_W, KEEP_W, IS_PACKED)
`define NIC_CHECK_AXI_MASTER(LABEL, ID_W, ADDR_W, DATA_W)
`define NIC_CHECK_AXI_RD_MASTER(LABEL, ID_W, ADDR_W, DATA_W)
`define NIC_CHECK_AXI_RD_MASTER_NOID(LABEL, ADDR_W, DATA_W)
`define NIC_CHECK_AXI_WR_MASTER(LABEL, ID_W, ADDR_W, DATA_W)
`define NIC_CHECK_AXIL_SLAVE(LABEL, ADDR_W, DATA_W)
`else
`define NIC_CHECK_AXIS_IN(LABEL, DATA_W, KEEP_W, IS_PACKED) \
    axis_check #(.DATA_WIDTH(DATA_W), .KEEP_WIDTH(KEEP_W), .PACKED(IS_PACKED), .NAME(LABEL)) \
    chk_s_axis (.clk(clk), .rst(rst), .tdata(s_axis_tdata), .tkeep(s_axis_tkeep), \
                .tvalid(s_axis_tvalid), .tready(s_axis_tready), .tlast(s_axis_tlast), \
                .tuser(1'b0));
`define NIC_CHECK_AXIS_OUT(LABEL, DATA_W, KEEP_W, IS_PACKED) \
    axis_check #(.DATA_WIDTH(DATA_W), .KEEP_WIDTH(KEEP_W), .PACKED(IS_PACKED), .NAME(LABEL)) \
    chk_m_axis (.clk(clk), .rst(rst), .tdata(m_axis_tdata), .tkeep(m_axis_tkeep), \
                .tvalid(m_axis_tvalid), .tready(m_axis_tready), .tlast(m_axis_tlast), \
                .tuser(1'b0));
`define NIC_CHECK_AXI_RD_PORTS(ARID, RID) \
    .arid(ARID), .araddr(m_axi_araddr), .arlen(m_axi_arlen), .arsize(m_axi_arsize), \
    .arburst(m_axi_arburst), .arvalid(m_axi_arvalid), .arready(m_axi_arready), \
    .rid(RID), .rdata(m_axi_rdata), .rresp(m_axi_rresp), .rlast(m_axi_rlast), \
    .rvalid(m_axi_rvalid), .rready(m_axi_rready)
`define NIC_CHECK_AXI_WR_PORTS \
    .awid(m_axi_awid), .awaddr(m_axi_awaddr), .awlen(m_axi_awlen), .awsize(m_axi_awsize), \
    .awburst(m_axi_awburst), .awvalid(m_axi_awvalid), .awready(m_axi_awready), \
    .wdata(m_axi_wdata), .wstrb(m_axi_wstrb), .wlast(m_axi_wlast), .wvalid(m_axi_wvalid), \
    .wready(m_axi_wready), .bid(m_axi_bid), .bresp(m_axi_bresp), .bvalid(m_axi_bvalid), \
    .bready(m_axi_bready)
`define NIC_CHECK_AXI_WR_IDLE(ID_W, ADDR_W, DATA_W) \
    .awid({(ID_W){1'b0}}), .awaddr({(ADDR_W){1'b0}}), .awlen(8'd0), .awsize(3'd0), \
    .awburst(2'b01), .awvalid(1'b0), .awready(1'b0), .wdata({(DATA_W){1'b0}}), \
    .wstrb({(DATA_W)/8{1'b0}}), .wlast(1'b0), .wvalid(1'b0), .wready(1'b0), \
    .bid({(ID_W){1'b0}}), .bresp(2'b00), .bvalid(1'b0), .bready(1'b0)
`define NIC_CHECK_AXI_RD_IDLE(ID_W, ADDR_W, DATA_W) \
    .arid({(ID_W){1'b0}}), .araddr({(ADDR_W){1'b0}}), .arlen(8'd0), .arsize(3'd0), \
    .arburst(2'b01), .arvalid(1'b0), .arready(1'b0), .rid({(ID_W){1'b0}}), \
    .rdata({(DATA_W){1'b0}}), .rresp(2'b00), .rlast(1'b0), .rvalid(1'b0), .rready(1'b0)
`define NIC_CHECK_AXI_MASTER(LABEL, ID_W, ADDR_W, DATA_W) \
    axi4_check #(.ID_WIDTH(ID_W), .ADDR_WIDTH(ADDR_W), .DATA_WIDTH(DATA_W), .NAME(LABEL)) \
    chk_m_axi (.clk(clk), .rst(rst), `NIC_CHECK_AXI_WR_PORTS, \
               `NIC_CHECK_AXI_RD_PORTS(m_axi_arid, m_axi_rid));
`define NIC_CHECK_AXI_RD_MASTER(LABEL, ID_W, ADDR_W, DATA_W) \
    axi4_check #(.ID_WIDTH(ID_W), .ADDR_WIDTH(ADDR_W), .DATA_WIDTH(DATA_W), .NAME(LABEL)) \
    chk_m_axi_rd (.clk(clk), .rst(rst), `NIC_CHECK_AXI_WR_IDLE(ID_W, ADDR_W, DATA_W), \
                  `NIC_CHECK_AXI_RD_PORTS(m_axi_arid, m_axi_rid));
`define NIC_CHECK_AXI_RD_MASTER_NOID(LABEL, ADDR_W, DATA_W) \
    axi4_check #(.ID_WIDTH(1), .ADDR_WIDTH(ADDR_W), .DATA_WIDTH(DATA_W), .NAME(LABEL)) \
    chk_m_axi_rd (.clk(clk), .rst(rst), `NIC_CHECK_AXI_WR_IDLE(1, ADDR_W, DATA_W), \
                  `NIC_CHECK_AXI_RD_PORTS(1'b0, 1'b0));
`define NIC_CHECK_AXI_WR_MASTER(LABEL, ID_W, ADDR_W, DATA_W) \
    axi4_check #(.ID_WIDTH(ID_W), .ADDR_WIDTH(ADDR_W), .DATA_WIDTH(DATA_W), .NAME(LABEL)) \
    chk_m_axi_wr (.clk(clk), .rst(rst), `NIC_CHECK_AXI_WR_PORTS, \
                  `NIC_CHECK_AXI_RD_IDLE(ID_W, ADDR_W, DATA_W));
`define NIC_CHECK_AXIL_SLAVE(LABEL, ADDR_W, DATA_W) \
    axil_check #(.ADDR_WIDTH(ADDR_W), .DATA_WIDTH(DATA_W), .NAME(LABEL)) \
    chk_s_axil (.clk(clk), .rst(rst), .awaddr(s_axil_awaddr), .awvalid(s_axil_awvalid), \
                .awready(s_axil_awready), .wdata(s_axil_wdata), .wstrb(s_axil_wstrb), \
                .wvalid(s_axil_wvalid), .wready(s_axil_wready), .bresp(s_axil_bresp), \
                .bvalid(s_axil_bvalid), .bready(s_axil_bready), .araddr(s_axil_araddr), \
                .arvalid(s_axil_arvalid), .arready(s_axil_arready), .rdata(s_axil_rdata), \
                .rresp(s_axil_rresp), .rvalid(s_axil_rvalid), .rready(s_axil_rready));
`endif

`endif
