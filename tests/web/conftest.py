"""The browser the page tests drive: Debian's chromium through Playwright (never
`playwright install`); the tests skip without it."""

from __future__ import annotations

import os

import pytest

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser():  # type: ignore[no-untyped-def]
    if not os.path.exists(CHROMIUM):
        pytest.skip("needs Debian's chromium at /usr/bin/chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        # --no-sandbox: the test machines run as root, where chromium's sandbox refuses.
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()
