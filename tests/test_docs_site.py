"""The documentation site builds with every link checked (`mkdocs build --strict`), its
reference pages come from the code, and the home page and a tutorial render in a real browser
(headless Chromium over HTTP, as a reader gets them) with no console error and no failed
request. The README stays a front door: short, with its links pointing at files that exist."""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from nicsim.testing.browser import chromium

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "WARNING" not in p.stderr, p.stderr[-3000:]
    return out


class _Log(http.server.SimpleHTTPRequestHandler):
    failed: list[str] = []

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if int(code) >= 400:
            self.failed.append(f"{code} {self.path}")

    def log_message(self, *args: object) -> None:  # quiet
        pass


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[tuple[str, list[str]]]:
    failed: list[str] = []
    handler = type("Handler", (_Log,), {"failed": failed})
    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: handler(*a, directory=str(site)))
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/", failed
    httpd.shutdown()


def browse(url: str, tmp: Path) -> tuple[str, list[str], np.ndarray]:
    """The page's DOM after load, its console messages, and a screenshot of it."""
    base = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--enable-logging=stderr", "--v=0", "--window-size=1280,900",
            "--virtual-time-budget=5000"]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = tmp / "shot.png"
    sp = subprocess.run([*base, f"--screenshot={shot}", url], capture_output=True, text=True,
                        timeout=120, cwd=tmp)
    assert sp.returncode == 0 and shot.exists(), sp.stderr[-2000:]
    console = [ln for ln in (dom.stderr + sp.stderr).splitlines() if ":CONSOLE" in ln]
    return dom.stdout, console, imread(shot)


@pytest.mark.parametrize(("page", "heading"), [
    ("index.html", "An RDMA NIC you can run without the hardware"),
    ("tutorials/exec.html", "Running a pyverbs program"),
])
def test_a_page_renders_in_chromium(served, tmp_path, page, heading):
    base, failed = served
    dom, console, shot = browse(base + page, tmp_path)
    assert console == [], console
    assert failed == [], failed  # every stylesheet, script, image and search index loaded
    assert heading in dom
    assert 'class="md-nav' in dom and "md-search" in dom  # the theme's navigation and search
    assert shot.shape[:2] == (900, 1280)
    # Not a blank page: the header band and text make many distinct colours.
    assert len(np.unique((shot[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 50


def test_the_console_check_sees_an_error(served, site, tmp_path):
    """The check above can fail: a page that throws is caught."""
    (site / "throws.html").write_text("<html><body><script>undefinedFn();</script></body></html>")
    base, _ = served
    _, console, _ = browse(base + "throws.html", tmp_path)
    assert any("undefinedFn" in ln for ln in console), console


def test_the_reference_comes_from_the_code(site):
    import argparse

    from nicsim.cli import parser
    from nicsim.hwif import CmdOpcode
    from nicsim.profiles.profile import profile_names
    from nicsim.scenario.schema import Scenario

    cli = (site / "reference" / "cli.html").read_text()
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert all(f"nicsim {name}" in cli for name in sub.choices), sorted(sub.choices)
    scenario = (site / "reference" / "scenario.html").read_text()
    assert all(f"<code>{f}</code>" in scenario for f in Scenario.model_fields)
    hwif = (site / "reference" / "hwif.html").read_text()
    assert all(op.name in hwif for op in CmdOpcode)
    profiles = (site / "reference" / "profiles.html").read_text()
    assert all(n in profiles for n in profile_names())


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    quick = re.search(r"## Quickstart\n\n```sh\n(.*?)```", text, re.S).group(1)
    assert [ln.split()[0:2] for ln in quick.splitlines()] == [["make", "run"], ["make", "test"]]
    assert not re.search(r"\bissue #?\d+|\bround \d+", text, re.I)  # history is the changelog's
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    assert links and [ln for ln in links if not (ROOT / ln).exists()] == []
