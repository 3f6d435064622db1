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

`endif
