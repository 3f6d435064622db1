"""A real browser for tests that render pages (report.html, the documentation site)."""

from __future__ import annotations

import shutil

import pytest


def chromium() -> str:
    """The path of a headless-capable Chromium; fails the test, saying how to install one,
    when there is none."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("headless Chromium is needed to check report.html and is not installed: run "
                "`bash scripts/install-tools.sh` (Debian: apt-get install chromium)")
