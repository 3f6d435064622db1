"""The `rdma` and `ip` commands a program under `nicsim exec` finds first on its PATH.

They answer what iproute2 would answer about the simulated devices, from a world built from
the same NICSIM_WORLD as the program's (so the names, addresses and link states agree):

    rdma link [show] [-j]      rdma dev [show] [-j]
    ip [-j] addr|address|a [show [dev] IFNAME]     ip [-j] link [show [dev] IFNAME]
    cat /sys/class/infiniband/DEV/...   (the device's sysfs attributes: node_guid, ports/1/
                                         state, pkeys/N, gids/N, gid_attrs/types/N, ...)

`ip` and `cat` asked about anything else run the system's; `rdma` asked anything else says
it is not simulated and exits 1. `nicsim exec` writes the world's netdevs to
$NICSIM_SHIM_DIR/world.json once, so each answer is a file read (no world is built for it);
without that file the world is built from NICSIM_WORLD.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import sys

from nicsim.driver.kernel.query import GID_TABLE_LEN, guid_from_mac
from nicsim.exec.spec import SHIM_DIR_ENV, WORLD_FILE, Netdev
from nicsim.hwif import GidType, gid_table
from nicsim.wire import mac_bytes


def _guid(mac: str) -> str:
    h = f"{guid_from_mac(mac):016x}"
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


def rdma_links(nds: list[Netdev]) -> list[dict[str, object]]:
    return [{"ifindex": int(n.device.removeprefix("nsnic")), "ifname": n.device, "port": 1,
             "state": "ACTIVE" if n.up else "DOWN",
             "physical_state": "LINK_UP" if n.up else "POLLING", "netdev": n.name,
             "netdev_index": n.ifindex} for n in nds]


def rdma_devs(nds: list[Netdev]) -> list[dict[str, object]]:
    return [{"ifindex": int(n.device.removeprefix("nsnic")), "ifname": n.device,
             "node_type": "ca", "fw": "2.0.0", "node_guid": _guid(n.mac),
             "sys_image_guid": _guid(n.mac)} for n in nds]


def ip_link(n: Netdev) -> dict[str, object]:
    flags = ["BROADCAST", "MULTICAST", "UP"] + (["LOWER_UP"] if n.up else [])
    return {"ifindex": n.ifindex, "ifname": n.name, "flags": flags, "mtu": n.mtu,
            "qdisc": "mq", "operstate": "UP" if n.up else "DOWN", "group": "default",
            "txqlen": 1000, "link_type": "ether", "address": n.mac,
            "broadcast": "ff:ff:ff:ff:ff:ff"}


def ip_addr(n: Netdev) -> dict[str, object]:
    d = ip_link(n)
    net = n.ip.rsplit(".", 1)[0]
    d["addr_info"] = [{"family": "inet", "local": n.ip, "prefixlen": 24,
                       "broadcast": f"{net}.255", "scope": "global", "label": n.name,
                       "valid_life_time": 4294967295, "preferred_life_time": 4294967295}]
    return d


def _text_link(n: Netdev) -> str:
    st = "ACTIVE" if n.up else "DOWN"
    ph = "LINK_UP" if n.up else "POLLING"
    return f"link {n.device}/1 state {st} physical_state {ph} netdev {n.name}"


def _world_netdevs() -> list[Netdev]:
    shim = os.environ.get(SHIM_DIR_ENV)
    if shim and os.path.isfile(os.path.join(shim, WORLD_FILE)):
        with open(os.path.join(shim, WORLD_FILE)) as f:
            return [Netdev(**d) for d in json.load(f)]
    from nicsim.exec.spec import from_env
    from nicsim.exec.world import build, netdevs

    return netdevs(build(from_env(), pcap=False))


def rdma_main(argv: list[str]) -> int:
    as_json = any(a in ("-j", "-json", "--json") for a in argv)
    words = [a for a in argv if not a.startswith("-")]
    obj = words[0] if words else "dev"
    cmd = words[1] if len(words) > 1 else "show"
    if obj not in ("link", "dev", "l", "d") or cmd not in ("show", "list", "s", "ls"):
        print(f"rdma {' '.join(argv)}: not simulated by nicsim (it answers 'rdma link show' "
              "and 'rdma dev show')", file=sys.stderr)
        return 1
    nds = _world_netdevs()
    if len(words) > 2:  # one device (rdma link show nsnic0/1, rdma dev show nsnic0)
        want = words[2].split("/")[0]
        nds = [n for n in nds if n.device == want]
        if not nds:
            print(f'Wrong device name "{words[2]}"', file=sys.stderr)
            return 1
    if obj.startswith("l"):
        rows = rdma_links(nds)
        text = [_text_link(n) for n in nds]
    else:
        rows = rdma_devs(nds)
        text = [f"{r['ifindex']}: {r['ifname']}: node_type ca fw {r['fw']} node_guid "
                f"{r['node_guid']} sys_image_guid {r['sys_image_guid']}" for r in rows]
    print(json.dumps(rows) if as_json else "\n".join(text))
    return 0


def _real(tool: str) -> str | None:
    shim = os.environ.get(SHIM_DIR_ENV)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and os.path.abspath(p) != (shim and os.path.abspath(shim)))
    return shutil.which(tool, path=path)


def ip_main(argv: list[str]) -> int:
    as_json = any(a in ("-j", "-json", "--json") for a in argv)
    words = [a for a in argv if not a.startswith("-")]
    nds = _world_netdevs() if words and words[0] in ("addr", "address", "a", "link", "l") \
        else []
    if words and nds:
        rest = [w for w in words[1:] if w not in ("show", "list", "s", "ls", "dev")]
        pick = [n for n in nds if not rest or n.name == rest[0]]
        if pick and len(rest) <= 1:
            rows = [ip_addr(n) if words[0].startswith("a") else ip_link(n) for n in pick]
            if as_json:
                print(json.dumps(rows))
            else:
                for r in rows:
                    print(f"{r['ifindex']}: {r['ifname']}: <{','.join(r['flags'])}> mtu "  # type: ignore[arg-type]
                          f"{r['mtu']} state {r['operstate']}\n    link/ether {r['address']} "
                          f"brd {r['broadcast']}")
                    for a in r.get("addr_info", []):  # type: ignore[union-attr]
                        print(f"    inet {a['local']}/{a['prefixlen']} scope global "
                              f"{a['label']}")
            return 0
    real = _real("ip")
    if real is None:
        print("ip: not found (nicsim simulates only 'ip addr show' and 'ip link show' of its "
              "devices' netdevs)", file=sys.stderr)
        return 1
    os.execv(real, [real, *argv])
    return 1  # pragma: no cover


SYSFS = "/sys/class/infiniband/"


def sysfs(path: str, nds: list[Netdev]) -> str | None:
    """The contents of a simulated device's sysfs file, None if there is no such file."""
    parts = path.removeprefix(SYSFS).strip("/").split("/")
    by_name = {n.device: n for n in nds}
    n = by_name.get(parts[0])
    if n is None:
        return None
    rest = parts[1:]
    guid = _guid(n.mac)
    top = {"node_guid": guid, "sys_image_guid": guid, "node_type": "1: CA", "fw_ver": "2.0.0",
           "hca_type": "nsnic", "hw_rev": "2"}
    if len(rest) == 1:
        return top.get(rest[0])
    if len(rest) < 3 or rest[:2] != ["ports", "1"]:
        return None
    rest = rest[2:]
    port = {"state": "4: ACTIVE" if n.up else "1: DOWN",
            "phys_state": "5: LinkUp" if n.up else "2: Polling", "link_layer": "Ethernet",
            "lid": "0x0", "sm_lid": "0x0", "lid_mask_count": "0",
            "cap_mask": "0x00000000"}
    if len(rest) == 1:
        return port.get(rest[0])
    table = {("pkeys", "0"): "0xffff"}
    # The GID table the device holds (hwif.gid_table), as ib_core's sysfs shows it: an empty
    # entry reads as the zero GID and its attributes cannot be read (EINVAL).
    gids = gid_table(mac_bytes(n.mac), ipaddress.ip_address(n.ip).packed, n.roce_v1)
    for i in range(GID_TABLE_LEN):
        gid, kind = gids[i] if i < len(gids) else (bytes(16), None)
        h = gid.hex()
        table["gids", str(i)] = ":".join(h[j:j + 4] for j in range(0, 32, 4))
        if kind is not None:
            table["gid_attrs", "types", str(i)] = \
                "IB/RoCE v1" if kind == GidType.ROCE_V1 else "RoCE v2"
            table["gid_attrs", "ndevs", str(i)] = n.name
    return table.get(tuple(rest))


def cat_main(argv: list[str]) -> int:
    sim = [a for a in argv if a.startswith(SYSFS)]
    if not sim:
        real = _real("cat")
        if real is None:
            print("cat: not found", file=sys.stderr)
            return 1
        os.execv(real, [real, *argv])
    nds = _world_netdevs()
    rc = 0
    for a in argv:
        if a.startswith("-"):
            continue
        text = sysfs(a, nds) if a.startswith(SYSFS) else None
        if text is None:
            print(f"cat: {a}: No such file or directory", file=sys.stderr)
            rc = 1
            continue
        print(text)
    return rc


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    tools = {"rdma": rdma_main, "ip": ip_main, "cat": cat_main}
    if not args or args[0] not in tools:
        print("usage: python -m nicsim.exec.answers rdma|ip|cat ARGS...", file=sys.stderr)
        return 2
    from nicsim.exec.spec import SpecError

    try:
        rc = tools[args[0]](args[1:])
        sys.stdout.flush()
        return rc
    except SpecError as e:
        print(f"{args[0]}: NICSIM_WORLD: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`| head -1`): stop quietly, as the real tools do; stdout
        # goes to /dev/null first, or Python complains again when it flushes at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
