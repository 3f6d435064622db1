-- nicsim-roce.lua: the RoCEv2 opcodes Wireshark's InfiniBand dissector does not know.
--
--   0x81  CNP, the Congestion Notification Packet (RoCEv2, Annex A17.9.3): BTH and 16
--         reserved bytes; the destination QP is the one to slow down
--   0x1C  RC FLUSH (IBA Memory Placement annex): FETH (selectivity level, placement type),
--         then RETH
--   0x1D  RC ATOMIC WRITE (the same annex): RETH, then the 8 bytes to write
--
-- Use it once:    tshark -X lua_script:wireshark/nicsim-roce.lua -r capture.pcap
-- or for good:    mkdir -p ~/.local/lib/wireshark/plugins &&
--                 cp wireshark/nicsim-roce.lua ~/.local/lib/wireshark/plugins/
-- A post-dissector: it names these packets in the Info column (instead of "Unknown
-- OpCode") and decodes their headers under "nicsim RoCEv2"; every other packet is left to
-- Wireshark.

local bth_opcode = Field.new("infiniband.bth.opcode")

local p = Proto("nicsim_roce", "nicsim RoCEv2")
local f = {
    opcode = ProtoField.string("nicsim_roce.opcode", "Opcode"),
    reserved = ProtoField.bytes("nicsim_roce.cnp.reserved", "Reserved"),
    selectivity = ProtoField.uint8("nicsim_roce.feth.selectivity", "Selectivity level",
                                   base.DEC, nil, 0x30),
    placement = ProtoField.uint8("nicsim_roce.feth.placement", "Placement type",
                                 base.HEX, nil, 0x0F),
    va = ProtoField.uint64("nicsim_roce.reth.va", "Virtual Address", base.HEX),
    rkey = ProtoField.uint32("nicsim_roce.reth.rkey", "Remote Key", base.HEX),
    dma_len = ProtoField.uint32("nicsim_roce.reth.dma_length", "DMA Length", base.DEC),
    data = ProtoField.uint64("nicsim_roce.atomic_write.data", "Data", base.HEX),
}
p.fields = { f.opcode, f.reserved, f.selectivity, f.placement, f.va, f.rkey, f.dma_len,
             f.data }

local BTH_LEN = 12
local NAMES = { [0x81] = "CNP", [0x1C] = "RC FLUSH", [0x1D] = "RC ATOMIC WRITE" }

local function reth(tree, tvb, at)
    tree:add(f.va, tvb(at, 8))
    tree:add(f.rkey, tvb(at + 8, 4))
    tree:add(f.dma_len, tvb(at + 12, 4))
end

function p.dissector(tvb, pinfo, tree)
    local op = bth_opcode()
    if op == nil then return end
    local name = NAMES[op.value]
    if name == nil then return end
    local info = tostring(pinfo.cols.info)
    pinfo.cols.info:set((info:gsub("Unknown OpCode", name .. " ")))
    local at = op.offset + BTH_LEN
    local t = tree:add(p, tvb(op.offset), "nicsim RoCEv2: " .. name)
    t:add(f.opcode, name)
    if op.value == 0x81 and tvb:len() >= at + 16 then
        t:add(f.reserved, tvb(at, 16))
    elseif op.value == 0x1C and tvb:len() >= at + 20 then
        t:add(f.selectivity, tvb(at + 3, 1))
        t:add(f.placement, tvb(at + 3, 1))
        reth(t, tvb, at + 4)
    elseif op.value == 0x1D and tvb:len() >= at + 24 then
        reth(t, tvb, at)
        t:add(f.data, tvb(at + 16, 8))
    end
end

register_postdissector(p)
