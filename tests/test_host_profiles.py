"""Host profiles (nicsim/profiles/hosts): the machine around the NIC, composed with a NIC
profile at run time. The same card in another host: the host's PCIe and CPU fields replace
the NIC profile's, the link trains to the narrower slot, the scenario's own fields win, and
the physics follows (a PCIe 3.0 x8 slot bounds a 100 GbE card's bandwidth)."""

from __future__ import annotations

import io
import json

import pytest

from nicsim.apps.perftest import run as perftest_run
from nicsim.apps.perftest.params import parse as perftest_parse
from nicsim.cli import main
from nicsim.exec.spec import WorldSpec
from nicsim.exec.world import _hardware
from nicsim.profiles import (
    ProfileError,
    host_profile_names,
    load_host_profile,
    load_profile,
    with_host,
)
from nicsim.scenario.schema import ScenarioError, parse_scenario

TRAFFIC = "ops:\n  - {op: write, bytes: 64}\n"


def _host_file(tmp_path, body: str, name: str = "h.yaml") -> str:
    p = tmp_path / name
    p.write_text("name: h\ntitle: a host\n" + body)
    return str(p)


def test_every_shipped_host_profile_loads_and_every_value_has_a_source():
    names = host_profile_names()
    assert "mark1-x670e" in names
    for n in names:
        p = load_host_profile(n)
        assert p.name == n and p.title
        assert set(p.sections) <= {"pcie", "cpu"}
        given = [f"{s}.{k}" for s, vals in p.sections.items() for k in vals]
        assert given, n
        assert all(f in p.sources for f in given), (n, set(given) - set(p.sources))


def test_a_host_profile_extends_another_and_the_iommu_reaches_the_pcie_model():
    p = load_host_profile("xeon-e5-2630v4-iommu")
    base = load_host_profile("xeon-e5-2630v4")
    assert p.sections["pcie"]["latency_ns"] == base.sections["pcie"]["latency_ns"]
    assert p.sections["pcie"]["iotlb_entries"] > 0 and "iotlb_entries" not in base.sections["pcie"]
    nic, *_ = _hardware(WorldSpec(profile="cx5-100g", host_profile="xeon-e5-2630v4-iommu"))
    assert (nic.pcie.iotlb_entries, nic.pcie.iotlb_miss_ns) == (
        p.sections["pcie"]["iotlb_entries"], p.sections["pcie"]["iotlb_miss_ns"])


def test_the_host_replaces_the_nics_host_fields_and_the_slot_bounds_the_link(tmp_path):
    nic = load_profile("cx5-100g").sections
    host = load_host_profile(_host_file(
        tmp_path, "pcie: {lanes: 8, gen: 5, latency_ns: 300}\ncpu: {post_send_ns: 150}\n"))
    out = with_host(nic, host)
    assert out["pcie"]["lanes"] == 8  # a narrower slot: the link trains to x8
    assert out["pcie"]["gen"] == nic["pcie"]["gen"] == 3  # a faster slot: the card's Gen3
    assert out["pcie"]["latency_ns"] == 300 and out["cpu"]["post_send_ns"] == 150
    assert out["nic"] == nic["nic"] and out["link"] == nic["link"]  # the card is the same
    assert nic["pcie"]["lanes"] == 16  # (the NIC profile itself is untouched)


def test_a_scenario_composes_nic_host_and_its_own_fields_in_that_order():
    sc = parse_scenario("profile: cx5-100g\nhost: {profile: mark1-x670e}\n" + TRAFFIC)
    assert (sc.pcie.gen, sc.pcie.lanes, sc.host.profile) == (3, 8, "mark1-x670e")
    assert sc.nic.send_engines == load_profile("cx5-100g").values()["nic"]["send_engines"]
    sc = parse_scenario("profile: cx5-100g\nhost: {profile: mark1-x670e}\npcie: {lanes: 4}\n"
                        + TRAFFIC)
    assert sc.pcie.lanes == 4  # the scenario's own field wins
    # Without a NIC profile the host goes over the model's defaults.
    sc = parse_scenario("host: {profile: mark1-x670e, mem_mib: 256}\n" + TRAFFIC)
    assert (sc.pcie.lanes, sc.host.mem_mib) == (8, 256)


def test_bad_host_profiles_get_one_line(tmp_path, capsys):
    with pytest.raises(ScenarioError, match="host.profile: unknown host profile 'nope'"):
        parse_scenario("host: {profile: nope}\n" + TRAFFIC)
    bad = _host_file(tmp_path, "nic: {send_engines: 4}\n")
    with pytest.raises(ProfileError, match="nic: not a host profile field") as e:
        load_host_profile(bad)
    assert "\n" not in str(e.value) and bad in str(e.value)
    with pytest.raises(ProfileError, match="pcie.lanes"):
        load_host_profile(_host_file(tmp_path, "pcie: {lanes: 0}\n", "z.yaml"))
    assert main(["run", "--no-pcap", "--host-profile", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown host profile 'nope'" in err and "\n" not in err
    assert main(["profiles", "--hosts", "nope"]) == 2
    assert "unknown host profile" in capsys.readouterr().err


def _write_bw_gbps(*flags: str) -> float:
    p = perftest_parse("ib_write_bw", ["-s", "1048576", "-n", "40", "--report_gbits",
                                       "--profile", "cx5-100g", *flags])
    res = perftest_run(p, io.StringIO(), io.StringIO())
    return float(res["results"][-1].bw_avg)


def test_a_pcie_3_x8_slot_bounds_a_100g_cards_write_bandwidth():
    """The Mark 1 lab's ConnectX-5 sits in an x8 slot: 1 MiB WRITEs run at what PCIe 3.0 x8
    carries (7.88 GB/s raw, less TLP headers and the read requests), not at the wire's 100
    Gb/s; the same card in its own x16 host does not."""
    x16 = _write_bw_gbps()
    x8 = _write_bw_gbps("--host-profile", "mark1-x670e")
    assert x16 > 90
    assert 50 < x8 < 8 * 8 * 128 / 130  # below Gen3 x8's raw rate, Gb/s
    assert x8 / x16 < 0.65


def test_run_and_exec_take_a_host_profile(capsys):
    assert main(["run", "--no-pcap", "--quiet", "--json", "--profile", "cx5-100g",
                 "--host-profile", "mark1-x670e"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["configuration"]["host"]["profile"] == "mark1-x670e"
    assert d["configuration"]["pcie"]["lanes"] == 8
    nic, _link, _costs, _faults = _hardware(WorldSpec(profile="cx5-100g",
                                                      host_profile="mark1-x670e"))
    assert (nic.pcie.gen, nic.pcie.lanes) == (3, 8)
    assert WorldSpec().with_text("host_profile=mark1-x670e").host_profile == "mark1-x670e"


def test_profiles_command_lists_hosts_and_shows_only_what_a_host_sets(capsys):
    assert main(["profiles", "--hosts"]) == 0
    assert "mark1-x670e" in capsys.readouterr().out
    assert main(["profiles", "--hosts", "mark1-x670e"]) == 0
    shown = capsys.readouterr().out
    assert "lanes: 8  # " in shown and "post_send_ns" not in shown
    assert "the NIC profile's" in shown
