"""NIC profiles (nicsim.profiles): shipped files load, the model's defaults are a profile,
a scenario's profile sits under its own fields, bad files get one line, and every NicConfig
knob reaches the model."""

from __future__ import annotations

import dataclasses

import pytest

from nicsim.cli import main
from nicsim.fabric.link import LinkConfig
from nicsim.host.host import CpuCosts
from nicsim.host.pcie import PcieConfig
from nicsim.nic.config import NicConfig
from nicsim.profiles import ProfileError, load_profile, profile_names
from nicsim.scenario import build
from nicsim.scenario.schema import ScenarioError, parse_scenario

TRAFFIC = "ops:\n  - {op: write, bytes: 64}\n"
REQUIRED = {"nsnic-100g", "cx4lx-25g", "cx4lx-10g", "cx5-100g", "irdma-10g", "ernic-100g",
            "rxe-25g"}


def test_the_shipped_profiles_load_and_each_names_its_hardware():
    assert set(profile_names()) >= REQUIRED
    for n in profile_names():
        p = load_profile(n)
        assert p.name == n and p.title
        v = p.values()
        assert v["link"]["rate_gbps"] > 0 and v["pcie"]["lanes"] > 0
        # The datasheet facts carry a source.
        for f in ("link.rate_gbps", "pcie.gen"):
            assert f in p.sources, (n, f)


def test_the_model_defaults_are_the_nsnic_profile():
    """A scenario without a profile, NicConfig(), PcieConfig(), LinkConfig() and CpuCosts()
    all hold the numbers of nsnic-100g.yaml: the defaults in code cannot drift from the data
    file."""
    v = load_profile("nsnic-100g").values()
    sc = parse_scenario(TRAFFIC)
    assert sc.pcie.model_dump() == v["pcie"]
    assert sc.nic.model_dump() == v["nic"]
    assert sc.cpu.model_dump() == v["cpu"]
    assert {k: getattr(sc.link, k) for k in v["link"]} == v["link"]
    assert build.nic_config(sc) == NicConfig()
    assert build.cpu_costs(sc) == CpuCosts()
    assert dataclasses.asdict(PcieConfig()) == v["pcie"]
    assert dataclasses.asdict(LinkConfig()) == v["link"]
    every = {f.name for f in dataclasses.fields(NicConfig)} - {"mac", "ip", "pcie", "cc",
                                                                 "pfc_classes", "max_uar"}
    assert every == set(v["nic"]), "a NicConfig knob that no profile or scenario can set"


def test_a_scenario_takes_its_profile_under_its_own_fields():
    v = load_profile("cx4lx-25g").values()
    sc = parse_scenario("profile: cx4lx-25g\n" + TRAFFIC)
    assert (sc.link.rate_gbps, sc.pcie.lanes, sc.nic.max_qp) == (
        v["link"]["rate_gbps"], v["pcie"]["lanes"], v["nic"]["max_qp"])
    assert sc.link.rate_gbps != LinkConfig().rate_gbps  # (the profile, not the default)
    sc = parse_scenario("profile: cx4lx-25g\nlink: {rate_gbps: 10}\n" + TRAFFIC)
    assert (sc.link.rate_gbps, sc.link.prop_ns) == (10.0, v["link"]["prop_ns"])  # from the profile
    # A base profile's fields come through the derived one.
    sc = parse_scenario("profile: cx4lx-10g\n" + TRAFFIC)
    assert (sc.link.rate_gbps, sc.pcie.lanes) == (10.0, v["pcie"]["lanes"])


def test_run_profile_flag_and_set_wins(capsys):
    assert main(["run", "--no-pcap", "--quiet", "--profile", "cx4lx-10g", "--json"]) == 0
    import json

    d = json.loads(capsys.readouterr().out)
    assert d["configuration"]["profile"] == "cx4lx-10g"
    assert d["configuration"]["link"]["rate_gbps"] == 10.0
    assert main(["run", "--no-pcap", "--quiet", "--profile", "cx4lx-10g", "--json",
                 "--set", "link.rate_gbps=25"]) == 0
    assert json.loads(capsys.readouterr().out)["configuration"]["link"]["rate_gbps"] == 25.0


def _bad(tmp_path, text: str) -> str:
    p = tmp_path / "p.yaml"
    p.write_text(text)
    with pytest.raises(ProfileError) as e:
        load_profile(str(p))
    msg = str(e.value)
    assert "\n" not in msg and str(p) in msg
    return msg


def test_bad_profiles_get_one_line(tmp_path):
    head = "name: x\ntitle: x\n"
    assert "nic.tx_readahead" in _bad(tmp_path, head + "nic: {tx_readahead: 0}\n")
    assert "nic.bogus" in _bad(tmp_path, head + "nic: {bogus: 1}\n")
    assert "colour: not a profile field" in _bad(tmp_path, head + "colour: red\n")
    assert "link.rate_gbps: a value, or {value" in _bad(
        tmp_path, head + "link: {rate_gbps: {val: 3}}\n")
    assert "link.rate_gbps.source" in _bad(
        tmp_path, head + "link: {rate_gbps: {value: 3, source: ''}}\n")
    assert "title" in _bad(tmp_path, "name: x\n")
    assert "perftest_device" in _bad(tmp_path, head + "perftest_device: cx9\n")
    assert "not valid YAML" in _bad(tmp_path, "name: [\n")
    (tmp_path / "q.yaml").write_text(head + "base: p.yaml\n")
    assert "loop" in _bad(tmp_path, head + "base: q.yaml\n")


def test_a_users_profile_file_extends_a_shipped_one(tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text("name: mine\ntitle: my card\nbase: cx5-100g\n"
                 "pcie: {gen: {value: 4, source: my lspci}}\n")
    prof = load_profile(str(p))
    v = prof.values()
    assert (v["pcie"]["gen"], v["pcie"]["lanes"], v["link"]["rate_gbps"]) == (4, 16, 100.0)
    assert prof.sources["pcie.gen"] == "my lspci"
    sc = parse_scenario(f"profile: {p}\n" + TRAFFIC)
    assert sc.pcie.gen == 4


def test_unknown_profile_in_a_scenario_is_one_line(capsys, tmp_path):
    with pytest.raises(ScenarioError, match="profile: unknown profile 'nope'"):
        parse_scenario("profile: nope\n" + TRAFFIC)
    assert main(["run", "--profile", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --profile nope: profile: unknown profile") and "\n" not in err


def test_profiles_command_shows_sources(capsys):
    assert main(["profiles"]) == 0
    listing = capsys.readouterr().out
    assert all(n in listing for n in REQUIRED)
    assert main(["profiles", "rxe-25g"]) == 0
    shown = capsys.readouterr().out
    assert "post_send_db" in shown and "post_send_ns: 780" in shown


def test_doorbell_decode_delays_the_work_by_exactly_its_time():
    """doorbell_ns is the time from the doorbell reaching the NIC to the scheduler seeing
    the new WQE: a lone WRITE completes later by exactly the difference."""
    from nicsim.driver import enums as e
    from nicsim.driver.user.verbs import SGE, SendWR

    from nicsim.testing.rdma import pair, wait

    def lone(doorbell_ns: float) -> float:
        w, a, b = pair(nic=NicConfig(doorbell_ns=doorbell_ns))
        wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 64, a.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(b.mr.rkey, b.mr.buf)
        a.ctx.host.spend(10_000)
        t0 = w.env.now
        a.qp.post_send(wr)
        wait(a)
        return w.env.now - t0

    assert lone(520.0) - lone(20.0) == pytest.approx(500.0, abs=1e-6)
