"""The progress bar: on a terminal, simulated time against the end, events per second and an
ETA; nothing when the output is not a terminal or with --quiet."""

from __future__ import annotations

import io

from nicsim.cli import main
from nicsim.scenario.progress import Progress
from nicsim.scenario.runner import Runner
from nicsim.scenario.schema import parse_scenario

STREAM = "pcap: null\nstreams:\n  - {op: write, bytes: 4096, depth: 8, duration_us: 300}\n"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_with_an_eta():
    tty = Tty()
    p = Progress(tty, after_s=0.0, every_s=0.0)
    r = Runner(parse_scenario(STREAM), progress=p).run()
    assert r.ok
    out = tty.getvalue()
    updates = [u for u in out.split("\r") if u.startswith("[")]
    assert len(updates) > 10
    assert "sim " in updates[-1] and "/ 300 us" in updates[-1] and "events/s" in updates[-1]
    assert "ETA" in updates[-1] and "%" in updates[-1]
    assert out.endswith("\r\x1b[K")  # the bar is wiped when the run ends


def test_nothing_when_not_a_terminal_or_quiet(capsys):
    p = Progress(io.StringIO(), after_s=0.0, every_s=0.0)
    assert not p.enabled
    q = Progress(Tty(), enabled=False, after_s=0.0, every_s=0.0)
    q.update(1.0, 2.0, 10)
    assert q.stream.getvalue() == ""
    assert main(["run", "--no-pcap", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
