`default_nettype none
`include "nic_common.vh"
// mr_translate: memory-region address translation (key -> MPT -> MTT -> physical pages).
//
// The MPT (memory protection table, indexed by key >> 8) and the MTT (memory translation table,
// one physical page address per 4 KiB page) live in inferred block RAM with a synchronous read.
// A lookup checks, in this order (nicsim.nic.translation.check, hwif.XlateStatus):
//   BAD_KEY     key index >= MPT_DEPTH, entry not valid, or stored key != request key
//               (the key's low byte is a variant: a stale key of a reused index never matches)
//   PD_MISMATCH stored pd != request pd
//   ACCESS      request access has a bit the entry does not grant
//   BOUNDS      [va, va+len) not inside [start, start+length) (computed without overflow)
//   MTT_FAULT   len > 0 and the MTT entry of its last page, mtt_index + ((va+len-1) >> 12)
//               - (start >> 12), is not below MTT_DEPTH (nicsim.nic.translation.mtt_in_range:
//               an MPT entry that points past the table never reaches another MR's pages)
// then splits [va, va+len) at 4 KiB page boundaries and emits one response per page segment:
// pa = MTT[mtt_index + (va >> 12) - (start >> 12)] + (va & 0xfff). Unlike the Python `split`,
// physically contiguous pages are NOT merged (a consumer may merge them).
// A failed check gives one response (status != OK, len 0, pa 0, last 1); an OK request of
// length 0 gives one response (OK, len 0, pa 0, last 1).
//
// Timing: a request is accepted (req_valid & req_ready at a rising edge) at most once per
// cycle; without backpressure its first response is taken at the 7th rising edge after that
// (fixed latency 7: request/MPT read, the entry registered, check (two stages: the sums and
// compares of the bounds and MTT range, then their outcome), segment/MTT read, the response
// registered, output register: each RAM's output and each carry chain in a cycle of its own,
// for 156.25 MHz on an ECP5). A request
// of N page segments occupies the segmenter for N cycles, during which req_ready falls (one
// segment per cycle is emitted, so back-to-back single-page requests run at 1 per cycle).
// Response backpressure stalls the whole pipeline through a 2-entry output skid buffer, so
// req_ready and rsp_valid are driven from registers only (no combinational ready path).
//
// Command port (one command per cycle):
//   cmd_op = 0 WRITE_MPT   cmd_data[255:0] = the driver's 32 bytes of an hwif.Mpt entry,
//                          little-endian (int.from_bytes(Mpt.sw_part(), "little")): no
//                          memory windows here (the model's NIC-owned window fields beyond
//                          them have no RTL counterpart); the entry is valid when
//                          flags bit 0 (MptFlags.VALID) is set and page_shift == 12 (the only
//                          page size implemented; other page sizes are stored invalid)
//   cmd_op = 1 WRITE_MTT   cmd_data[63:0] = physical address of the page (4 KiB aligned:
//                          bits 11:0 are ignored)
//   cmd_op = 2 INVALIDATE_MPT (cmd_data ignored)
//   cmd_index: MPT or MTT index; commands to an index >= the table depth are ignored.
// A command and a lookup in the same cycle: the lookup sees the MPT before the command.
// A lookup reads the MPT when accepted and the MTT a cycle or more later, so software must
// not rewrite an MR's entries while lookups of it are in flight (invalidate, drain, rewrite);
// an MTT entry read in the cycle it is written reads undefined in hardware.
// After reset the unit writes every MPT entry invalid, one per cycle: cmd_ready and req_ready
// stay low for MPT_DEPTH cycles. The MTT is not cleared.
//
// Parameters:
//   MPT_DEPTH  number of MPT entries (>= 2)
//   MTT_DEPTH  number of MTT entries (>= 2, a power of two)
//   TAG_WIDTH  width of the request tag returned with every response segment (>= 1)
//   PA_WIDTH   physical address width (13..64)
//   LEN_WIDTH  request length width in bits (14..63)
//
// Ports:
//   clk, rst              clock; synchronous active-high reset
//   cmd_valid, cmd_ready  command handshake (ready except during the reset sweep)
//   cmd_op[1:0]           0 WRITE_MPT, 1 WRITE_MTT, 2 INVALIDATE_MPT, 3 no-op
//   cmd_index[31:0]       table index
//   cmd_data[255:0]       MPT record or MTT page address (see above)
//   req_valid, req_ready  lookup request handshake
//   req_key[31:0]         lkey/rkey (index = key >> 8)
//   req_pd[31:0]          protection domain of the requester
//   req_access[7:0]       hwif.Access bits needed
//   req_va[63:0]          virtual start address
//   req_len[LEN_WIDTH-1:0] length in bytes
//   req_tag[TAG_WIDTH-1:0] opaque tag, returned on every response of the request
//   rsp_valid, rsp_ready  response handshake (one per page segment)
//   rsp_status[2:0]       hwif.XlateStatus
//   rsp_pa[PA_WIDTH-1:0]  physical address of the segment
//   rsp_len[12:0]         segment length in bytes (1..4096; 0 for an error or an empty request)
//   rsp_last              last segment of the request
//   rsp_tag[TAG_WIDTH-1:0] the request's tag
module mr_translate #(
    parameter MPT_DEPTH = 256,
    parameter MTT_DEPTH = 1024,
    parameter TAG_WIDTH = 8,
    parameter PA_WIDTH = 64,
    parameter LEN_WIDTH = 32
) (
    input  wire                  clk,
    input  wire                  rst,

    input  wire                  cmd_valid,
    output wire                  cmd_ready,
    input  wire [1:0]            cmd_op,
    input  wire [31:0]           cmd_index,
    input  wire [255:0]          cmd_data,

    input  wire                  req_valid,
    output wire                  req_ready,
    input  wire [31:0]           req_key,
    input  wire [31:0]           req_pd,
    input  wire [7:0]            req_access,
    input  wire [63:0]           req_va,
    input  wire [LEN_WIDTH-1:0]  req_len,
    input  wire [TAG_WIDTH-1:0]  req_tag,

    output wire                  rsp_valid,
    input  wire                  rsp_ready,
    output wire [2:0]            rsp_status,
    output wire [PA_WIDTH-1:0]   rsp_pa,
    output wire [12:0]           rsp_len,
    output wire                  rsp_last,
    output wire [TAG_WIDTH-1:0]  rsp_tag
);

    `NIC_CLOG2_FUNCTION

    localparam PAGE_SHIFT = 12;
    localparam MPT_AW = clog2(MPT_DEPTH);
    localparam MTT_AW = clog2(MTT_DEPTH);
    localparam PFN_W = PA_WIDTH - PAGE_SHIFT;  // stored page frame number width

    localparam [1:0] OP_WRITE_MPT = 2'd0;
    localparam [1:0] OP_WRITE_MTT = 2'd1;
    localparam [1:0] OP_INVALIDATE_MPT = 2'd2;

    localparam [2:0] ST_OK = 3'd0;
    localparam [2:0] ST_BAD_KEY = 3'd1;
    localparam [2:0] ST_PD_MISMATCH = 3'd2;
    localparam [2:0] ST_ACCESS = 3'd3;
    localparam [2:0] ST_BOUNDS = 3'd4;
    localparam [2:0] ST_MTT_FAULT = 3'd5;

    // MPT entry as stored: {valid, mtt_high, access, mtt_index[MTT_AW-1:0], length, start,
    // pd, key}; mtt_high: the driver's mtt_index is at or past MTT_DEPTH
    localparam MPT_W = 1 + 1 + 8 + MTT_AW + 64 + 64 + 32 + 32;
    localparam integer LAST_MPT_I = MPT_DEPTH - 1;
    localparam [MPT_AW-1:0] LAST_MPT = LAST_MPT_I[MPT_AW-1:0];

    // ---------------------------------------------------------------- tables
    reg [MPT_W-1:0]     mpt_mem [0:MPT_DEPTH-1];
    // (no_rw_check: an entry is never read in the cycle it is written, by the rule below,
    // so synthesis adds no collision logic after the RAM)
    (* no_rw_check *)
    reg [PFN_W-1:0]     mtt_mem [0:MTT_DEPTH-1];

    // after reset, every MPT entry is written invalid, one per cycle (MPT_DEPTH cycles)
    reg                 init_busy;
    reg [MPT_AW-1:0]    init_idx;

    wire cmd_mpt_in_range = cmd_index < MPT_DEPTH;
    wire cmd_mtt_in_range = cmd_index < MTT_DEPTH;
    wire mpt_we = cmd_valid && cmd_op == OP_WRITE_MPT && cmd_mpt_in_range;
    wire mpt_inv = cmd_valid && cmd_op == OP_INVALIDATE_MPT && cmd_mpt_in_range;
    wire mtt_we = cmd_valid && cmd_op == OP_WRITE_MTT && cmd_mtt_in_range;
    wire [MPT_AW-1:0] cmd_mpt_addr = cmd_index[MPT_AW-1:0];
    wire [MTT_AW-1:0] cmd_mtt_addr = cmd_index[MTT_AW-1:0];
    // Mpt record: key[31:0] pd[63:32] start[127:64] length[191:128] mtt_index[223:192]
    // access[231:224] flags[239:232] page_shift[247:240]
    wire cmd_mpt_valid = mpt_we && cmd_data[232] && cmd_data[247:240] == PAGE_SHIFT;
    wire cmd_mtt_high = |cmd_data[223:192+MTT_AW];
    wire [MPT_W-1:0] cmd_mpt_entry = {cmd_mpt_valid, cmd_mtt_high, cmd_data[231:224],
                                      cmd_data[192 +: MTT_AW], cmd_data[191:0]};
    // MPT write port: the reset sweep, WRITE_MPT, or INVALIDATE_MPT (valid bit 0)
    wire mpt_wr = init_busy || mpt_we || mpt_inv;
    wire [MPT_AW-1:0] mpt_wr_addr = init_busy ? init_idx : cmd_mpt_addr;
    wire [MPT_W-1:0] mpt_wr_data = init_busy ? {MPT_W{1'b0}} : cmd_mpt_entry;
    // unused record bits: flags 7:1, reserved byte
    wire unused_cmd_bits = &{1'b0, cmd_data[239:233], cmd_data[255:248]};

    assign cmd_ready = !init_busy;

    // ---------------------------------------------------------------- pipeline control
    // en: the pipeline advances (the skid buffer's spare entry is empty)
    reg  tmp_valid;
    wire en = !tmp_valid;

    // stage A: accepted request + MPT read data (the block RAM's output)
    reg                  a_valid;
    reg [31:0]           a_key;
    reg [31:0]           a_pd;
    reg [7:0]            a_access;
    reg [63:0]           a_va;
    reg [LEN_WIDTH-1:0]  a_len;
    reg [TAG_WIDTH-1:0]  a_tag;
    reg                  a_oor;   // key index beyond the MPT
    reg [MPT_W-1:0]      mpt_q;

    // stage B: the request and its MPT entry, registered (the RAM's output drives no logic)
    reg                  b_valid;
    reg [31:0]           b_key;
    reg [31:0]           b_pd;
    reg [7:0]            b_access;
    reg [63:0]           b_va;
    reg [LEN_WIDTH-1:0]  b_len;
    reg [63:0]           b_vlast; // va + len - 1: the request's last byte (len > 0)
    reg [TAG_WIDTH-1:0]  b_tag;
    reg                  b_oor;   // key index beyond the MPT
    reg [64:0]           b_end;   // va + len: one past the request's last byte
    reg [MPT_W-1:0]      mpt_r;

    // stage B2: the checks' parts, each a compare or a sum (one carry chain per stage)
    reg                  b2_valid;
    reg [2:0]            b2_pre;       // key, PD and access checks' status (OK if all pass)
    reg                  b2_va_low;    // va < start
    reg [64:0]           b2_end;       // va + len
    reg [64:0]           b2_m_end;     // start + length
    reg [51:0]           b2_last_pg;   // the last byte's page, from the MR's first page
    reg [MTT_AW-1:0]     b2_first_off; // the first byte's page, from the MR's first (mod depth)
    reg [MTT_AW-1:0]     b2_mtt_index;
    reg                  b2_mtt_high;
    reg                  b2_len_zero;
    reg [TAG_WIDTH-1:0]  b2_tag;
    reg [PAGE_SHIFT-1:0] b2_off;
    reg [PAGE_SHIFT:0]   b2_room;      // bytes from b2_off to the page's end
    reg [LEN_WIDTH-1:0]  b2_len;

    // stage C: segmenter
    reg                  c_valid;
    reg [2:0]            c_status;
    reg [TAG_WIDTH-1:0]  c_tag;
    reg [MTT_AW-1:0]     c_idx;
    reg [PAGE_SHIFT-1:0] c_off;
    reg [PAGE_SHIFT:0]   c_room;  // bytes from c_off to the page's end (a register: no sum)
    reg                  c_fits_q; // c_rem <= c_room, worked out the cycle before
    reg [LEN_WIDTH-1:0]  c_rem;

    // stage D: MTT read data + segment
    reg                  d_valid;
    reg [2:0]            d_status;
    reg [TAG_WIDTH-1:0]  d_tag;
    reg [PAGE_SHIFT-1:0] d_off;
    reg [PAGE_SHIFT:0]   d_len;
    reg                  d_last;
    reg                  d_pa_en;
    reg [PFN_W-1:0]      mtt_q;

    // segmenter: the segment emitted this cycle
    localparam [PAGE_SHIFT:0] PAGE_BYTES = 1 << PAGE_SHIFT;
    localparam [PAGE_SHIFT+1:0] PAGE_BYTES2 = 1 << PAGE_SHIFT;  // (one bit wider)
    wire                 c_fits = c_fits_q;
    wire                 c_err = c_status != ST_OK;
    wire                 c_last = c_err || c_fits;
    wire [PAGE_SHIFT:0]  c_seg = c_err ? {(PAGE_SHIFT+1){1'b0}} :
                                 c_fits ? c_rem[PAGE_SHIFT:0] : c_room;
    wire                 c_free = !c_valid || c_last;
    wire                 b2_free = !b2_valid || c_free;
    wire                 b_free = !b_valid || b2_free;
    wire                 a_free = !a_valid || b_free;

    assign req_ready = en && a_free && !init_busy;
    wire req_accept = req_valid && req_ready;
    wire a_to_b = en && a_valid && b_free;
    wire b_to_b2 = en && b_valid && b2_free;
    wire b2_to_c = en && b2_valid && c_free;

    wire [MPT_AW-1:0] req_idx = req_key[8 +: MPT_AW];
    wire req_oor = {8'd0, req_key[31:8]} >= MPT_DEPTH;

    // ---------------------------------------------------------------- stage B checks
    wire [31:0] m_key = mpt_r[31:0];
    wire [31:0] m_pd = mpt_r[63:32];
    wire [63:0] m_start = mpt_r[127:64];
    wire [63:0] m_length = mpt_r[191:128];
    wire [MTT_AW-1:0] m_mtt_index = mpt_r[192 +: MTT_AW];
    wire [7:0]  m_access = mpt_r[192+MTT_AW +: 8];
    wire        m_mtt_high = mpt_r[MPT_W-2];
    wire        m_valid = mpt_r[MPT_W-1];

    wire key_ok = !b_oor && m_valid && m_key == b_key;
    wire pd_ok = m_pd == b_pd;
    wire acc_ok = (b_access & ~m_access) == 8'd0;
    wire [2:0] b_pre = !key_ok ? ST_BAD_KEY : !pd_ok ? ST_PD_MISMATCH :
                       !acc_ok ? ST_ACCESS : ST_OK;
    wire unused_vlast = &{1'b0, b_vlast[PAGE_SHIFT-1:0]};  // (the page number only)

    // ---------------------------------------------------------------- stage B2 checks
    // end > m_end by halves (two carry chains side by side, not one of 65 bits)
    wire end_gt = b2_end[64:32] > b2_m_end[64:32] ||
                  (b2_end[64:32] == b2_m_end[64:32] && b2_end[31:0] > b2_m_end[31:0]);
    wire bnd_ok = !b2_va_low && !end_gt;
    // the last page's MTT entry, within bounds: its page offset in the MR, then the index
    wire [MTT_AW:0] b2_last_idx = {1'b0, b2_mtt_index} + {1'b0, b2_last_pg[MTT_AW-1:0]};
    wire mtt_ok = b2_len_zero ||
                  (!b2_mtt_high && b2_last_pg[51:MTT_AW] == {(52-MTT_AW){1'b0}} &&
                   !b2_last_idx[MTT_AW]);
    wire [2:0] b2_status = b2_pre != ST_OK ? b2_pre :
                           !bnd_ok ? ST_BOUNDS :
                           !mtt_ok ? ST_MTT_FAULT : ST_OK;

    // ---------------------------------------------------------------- table memories
    always @(posedge clk) begin
        if (mpt_wr)
            mpt_mem[mpt_wr_addr] <= mpt_wr_data;
        if (req_accept)
            mpt_q <= mpt_mem[req_idx];
    end

    always @(posedge clk) begin
        if (mtt_we)
            mtt_mem[cmd_mtt_addr] <= cmd_data[PA_WIDTH-1:PAGE_SHIFT];
        if (en && c_valid)
            mtt_q <= mtt_mem[c_idx];
    end

    always @(posedge clk) begin
        if (rst) begin
            init_busy <= 1'b1;
            init_idx <= {MPT_AW{1'b0}};
        end else if (init_busy) begin
            init_idx <= init_idx + 1'b1;
            if (init_idx == LAST_MPT)
                init_busy <= 1'b0;
        end
    end

    // ---------------------------------------------------------------- stages A, B, B2, C, D
    always @(posedge clk) begin
        if (req_accept) begin
            a_key <= req_key;
            a_pd <= req_pd;
            a_access <= req_access;
            a_va <= req_va;
            a_len <= req_len;
            a_tag <= req_tag;
            a_oor <= req_oor;
        end

        if (a_to_b) begin
            mpt_r <= mpt_q;
            b_key <= a_key;
            b_pd <= a_pd;
            b_access <= a_access;
            b_va <= a_va;
            b_len <= a_len;
            b_vlast <= a_va + {{(64-LEN_WIDTH){1'b0}}, a_len} - 64'd1;
            b_end <= {1'b0, a_va} + {{(65-LEN_WIDTH){1'b0}}, a_len};
            b_tag <= a_tag;
            b_oor <= a_oor;
        end

        if (b_to_b2) begin
            b2_pre <= b_pre;
            b2_va_low <= b_va < m_start;
            b2_end <= b_end;
            b2_m_end <= {1'b0, m_start} + {1'b0, m_length};
            b2_last_pg <= b_vlast[63:PAGE_SHIFT] - m_start[63:PAGE_SHIFT];
            b2_first_off <= b_va[PAGE_SHIFT +: MTT_AW] - m_start[PAGE_SHIFT +: MTT_AW];
            b2_mtt_index <= m_mtt_index;
            b2_mtt_high <= m_mtt_high;
            b2_len_zero <= b_len == {LEN_WIDTH{1'b0}};
            b2_tag <= b_tag;
            b2_off <= b_va[PAGE_SHIFT-1:0];
            b2_room <= PAGE_BYTES - {1'b0, b_va[PAGE_SHIFT-1:0]};
            b2_len <= b_len;
        end

        if (b2_to_c) begin
            c_status <= b2_status;
            c_tag <= b2_tag;
            c_idx <= b2_mtt_index + b2_first_off;
            c_off <= b2_off;
            c_room <= b2_room;
            c_fits_q <= b2_len <= {{(LEN_WIDTH-PAGE_SHIFT-1){1'b0}}, b2_room};
            c_rem <= b2_len;
        end else if (en && c_valid && !c_last) begin
            c_idx <= c_idx + 1'b1;
            c_off <= {PAGE_SHIFT{1'b0}};
            c_room <= PAGE_BYTES;
            // (not the last segment: it took the page's room, not c_seg's mux of it; what
            // is left fits the next page if c_rem - c_room <= PAGE_BYTES)
            c_rem <= c_rem - {{(LEN_WIDTH-PAGE_SHIFT-1){1'b0}}, c_room};
            c_fits_q <= c_rem <= {{(LEN_WIDTH-PAGE_SHIFT-2){1'b0}}, {1'b0, c_room} + PAGE_BYTES2};
        end

        if (en) begin
            d_status <= c_status;
            d_tag <= c_tag;
            d_off <= c_off;
            d_len <= c_seg;
            d_last <= c_last;
            d_pa_en <= !c_err && c_seg != {(PAGE_SHIFT+1){1'b0}};
        end

        if (rst) begin
            a_valid <= 1'b0;
            b_valid <= 1'b0;
            b2_valid <= 1'b0;
            c_valid <= 1'b0;
            d_valid <= 1'b0;
        end else begin
            if (req_accept)
                a_valid <= 1'b1;
            else if (a_to_b)
                a_valid <= 1'b0;
            if (a_to_b)
                b_valid <= 1'b1;
            else if (b_to_b2)
                b_valid <= 1'b0;
            if (b_to_b2)
                b2_valid <= 1'b1;
            else if (b2_to_c)
                b2_valid <= 1'b0;
            if (en) begin
                if (c_free)
                    c_valid <= b2_valid;
                d_valid <= c_valid;
            end
        end
    end

    // ---------------------------------------------------------------- output skid buffer
    localparam OUT_W = 3 + PA_WIDTH + 13 + 1 + TAG_WIDTH;
    // stage E: the response registered, the MTT RAM's output as it came (no logic after
    // the RAM in its cycle); the address is made from it on the way out
    reg              e_valid;
    reg  [2:0]       e_status;
    reg  [PFN_W-1:0] e_pfn;
    reg  [PAGE_SHIFT-1:0] e_off;
    reg              e_pa_en;
    reg  [12:0]      e_len;
    reg              e_last;
    reg  [TAG_WIDTH-1:0] e_tag;
    wire [PA_WIDTH-1:0] e_pa = e_pa_en ? {e_pfn, e_off} : {PA_WIDTH{1'b0}};
    wire [OUT_W-1:0] e_word = {e_status, e_pa, e_len, e_last, e_tag};
    reg  [OUT_W-1:0] out_word;
    reg  [OUT_W-1:0] tmp_word;
    reg              out_valid;

    always @(posedge clk) begin
        if (en) begin
            e_status <= d_status;
            e_pfn <= mtt_q;
            e_off <= d_off;
            e_pa_en <= d_pa_en;
            e_len <= d_len;
            e_last <= d_last;
            e_tag <= d_tag;
        end
        if (rst)
            e_valid <= 1'b0;
        else if (en)
            e_valid <= d_valid;
    end

    always @(posedge clk) begin
        if (rst) begin
            out_valid <= 1'b0;
            tmp_valid <= 1'b0;
        end else if (!out_valid || rsp_ready) begin
            if (tmp_valid) begin
                out_word <= tmp_word;
                out_valid <= 1'b1;
                tmp_valid <= 1'b0;
            end else begin
                out_word <= e_word;
                out_valid <= e_valid;
            end
        end else if (e_valid && !tmp_valid) begin
            // output held, spare entry empty (en = 1): park the stage E word
            tmp_word <= e_word;
            tmp_valid <= 1'b1;
        end
    end

    assign rsp_valid = out_valid;
    assign {rsp_status, rsp_pa, rsp_len, rsp_last, rsp_tag} = out_word;

endmodule
`default_nettype wire
