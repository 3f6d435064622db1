"""report.html opens from the file system in a real browser (headless Chromium) with every
image loaded. Chromium is installed by scripts/install-tools.sh (which `make test` runs); the
test installs nothing and fails, saying so, when it is missing."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from nicsim.cli import main
from nicsim.testing.browser import chromium

# Appended to a copy of the report: after the page has loaded, it writes into the title
# whether every image decoded, and which did not.
CHECK = """<script>
window.addEventListener("load", () => {
  const imgs = Array.from(document.images);
  const bad = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src);
  const tables = document.querySelectorAll("table").length;
  document.title = bad.length ? "BROKEN " + bad.join(" ")
                              : "LOADED " + imgs.length + " " + tables;
});
</script>"""


def render(page: Path) -> str:
    """The DOM of `page` after load, as headless Chromium has it."""
    p = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def test_report_html_loads_with_its_images(tmp_path):
    s = tmp_path / "w.yaml"
    s.write_text("name: web\npcap: null\nflows:\n  - {cdf: fb_hadoop, load: 0.3, count: 60}\n")
    out = tmp_path / "out"
    assert main(["run", str(s), "--out", str(out), "--quiet"]) == 0
    html = (out / "report.html").read_text()
    imgs = re.findall(r'<img src="([^"]+)"', html)
    assert {"fct_slowdown.png", "latency_cdf.png", "qp_goodput.png"} <= set(imgs)
    assert all(not i.startswith(("/", "http")) for i in imgs)  # relative: opens anywhere
    check = out / "check.html"
    check.write_text(html.replace("</body>", CHECK + "</body>"))
    dom = render(check)
    title = re.search(r"<title>(.*?)</title>", dom, re.S).group(1)
    assert title.startswith("LOADED"), title
    n_img, n_tables = map(int, title.split()[1:])
    assert n_img == len(imgs) and n_tables >= 4
    assert "FCT slowdown by flow size" in dom and "fb_hadoop" in dom


def test_a_report_shows_a_broken_image_as_broken(tmp_path):
    """The check itself can fail: a missing picture is reported."""
    page = tmp_path / "r.html"
    page.write_text("<html><head><title>x</title></head><body><img src='missing.png'>"
                    + CHECK + "</body></html>")
    title = re.search(r"<title>(.*?)</title>", render(page), re.S).group(1)
    assert title.startswith("BROKEN") and "missing.png" in title
