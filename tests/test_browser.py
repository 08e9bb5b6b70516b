"""The report in a real browser (Debian's headless chromium): figures decode, no script errors, no alert."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from suite.cli import main

DATA = Path(__file__).parent / "data"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH_PX = 1280  # a laptop's browser window: no table of the report may need a scroll bar at this width
BROWSER_TIMEOUT_S = 45  # a cold chromium start on a 2-core box takes a few seconds; more means it hung
# Flags that keep headless chromium from reaching the network or needing a sandbox (containers run as root).
QUIET_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--hide-scrollbars",
]

pytestmark = pytest.mark.browser


def _browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no chromium on PATH; install it with `apt-get install -y chromium` to run the browser test")


def _run(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [browser, *QUIET_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S)


def test_report_renders_in_chromium(tmp_path):
    browser = _browser()
    report = tmp_path / "report.html"
    inputs = [DATA / name for name in ("a100x2.json", "xss.json", "foreign.json", "schema0.json")]
    assert main(["report", *map(str, inputs), DATA.joinpath("partial").as_posix(), "-o", str(report)]) == 0
    url = report.resolve().as_uri()

    dom = _run(
        browser,
        tmp_path / "profile-dom",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=10000",
        f"--window-size={WIDTH_PX},1000",
        "--dump-dom",
        url,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom.stdout)
    assert body, dom.stdout[:500]
    loaded = re.search(r'data-images-loaded="(\d+)/(\d+)"', body.group(0))
    assert loaded, f"the page's load handler did not run: {body.group(0)}"
    ok, total = map(int, loaded.groups())
    assert total >= 8 and ok == total, f"{ok} of {total} figures decoded"
    wide = re.search(r'data-wide-tables="([^"]*)"', body.group(0))
    assert wide and wide.group(1) == "", f"tables wider than the page at {WIDTH_PX} px: {wide and wide.group(1)}"
    html_tag = re.search(r"<html[^>]*>", dom.stdout).group(0)
    assert "data-js-errors" not in html_tag, html_tag
    assert "data-alert-fired" not in html_tag, "a script from a results file ran"
    console_errors = [
        line
        for line in dom.stderr.splitlines()
        if "Uncaught" in line or ("CONSOLE" in line and "ERROR" in line.upper().split("CONSOLE")[0])
    ]
    assert not console_errors, console_errors
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom.stdout

    shot = tmp_path / "report.png"
    result = _run(browser, tmp_path / "profile-shot", f"--screenshot={shot}", f"--window-size={WIDTH_PX},3000", url)
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.exists() and shot.stat().st_size > 50_000  # a blank 1280x3000 page is a few KB
