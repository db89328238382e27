"""The README's one-machine quick start, walked as a newcomer would, in Chromium at 1280 and
390 px: `serve token create me`, `serve` (its own store, never the results), `submit latest`
(the page and the division it prints), then the front page showing the run ranked, its
median on screen, beside the labelled reference rows; and `history` untouched.

`torchmark run --quick` itself (a minute on 2 cores) is stood in for by `torchmark import`
of a quick run: the CPU half of the committed h100-quick run, as a laptop's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from boardtest import START_S, free_port, stop
from torchmark import reference
from torchmark.store.exchange import export_run

pytestmark = pytest.mark.browser
MINE = "My Laptop CPU"


def torchmark(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "torchmark", *args], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def newcomer(tmp_path: Path) -> Iterator[tuple[dict[str, str], str]]:
    """A user's environment (their data directory, their results store) with one quick run
    stored, and `torchmark board` running there as the README starts it: (env, URL)."""
    env = os.environ | {
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "TORCHMARK_DB": f"sqlite:///{tmp_path / 'data' / 'torchmark' / 'results.db'}",
        "COLUMNS": "200",
    }
    run = reference.load("h100-quick").run
    assert run is not None
    mine = run.model_copy(deep=True, update={"run_id": None})
    mine.environment["devices"] = {"cpu": {**run.environment["devices"]["cpu"], "model": MINE}}
    mine.results = [r for r in run.results if r.device == "cpu"]
    (tmp_path / "quick.json").write_text(export_run(mine), encoding="utf-8")
    torchmark(env, "import", str(tmp_path / "quick.json"))
    port = free_port()
    with (tmp_path / "serve.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "torchmark", "board", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_S
    while True:
        try:
            urllib.request.urlopen(url + "/api/v1/runs", timeout=2).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, (
                tmp_path / "serve.log"
            ).read_text()[-2000:]
            time.sleep(0.2)
    try:
        yield env, url
    finally:
        stop(proc)


def test_the_readme_quick_start_from_serve_to_seeing_your_run_ranked(  # type: ignore[no-untyped-def]
    browser, newcomer: tuple[dict[str, str], str]
) -> None:
    env, url = newcomer
    created = torchmark(env, "board", "token", "create", "me")
    token = created.strip().splitlines()[-1]
    assert "board.db" in " ".join(created.split())
    said = " ".join(torchmark(env, "submit", "latest", "--server", url, "--token", token).split())
    page_url = re.search(rf"{url}/runs/[0-9a-f-]+", said)
    assert page_url is not None, said
    assert "division: custom (--quick)" in said
    for width in (1280, 390):
        page = browser.new_page(viewport={"width": width, "height": 844})
        page.goto(url + "/")
        main = page.locator("main").inner_text()
        assert "custom (1 run)" in main and "Machines ranked: seed-add as-published" in main
        row = page.locator("#board tbody tr").first
        assert MINE in row.inner_text() and row.locator("td.rank").inner_text() == "1"
        on_screen(page, row.locator("td.num").first, width)
        refs = page.locator("#board tbody.reference").inner_text()
        assert "NVIDIA H100" in refs and "NVIDIA H200" in refs  # labelled, never ranked
        assert page.locator("#seed tr.mine").count() == 1  # placed in the blog's table
        page.goto(page_url.group())
        assert "Division: custom (--quick)" in page.locator("main").inner_text()
        on_screen(page, page.locator("#results tbody tr").first.locator("td.num").first, width)
        assert page.evaluate("document.scrollingElement.scrollWidth <= innerWidth")
        page.close()
    history = torchmark(env, "history")
    runs = [line for line in history.splitlines() if re.match(r"\d{8}-\d{6}-", line)]
    assert len(runs) == 1, history  # the user's own run: no copy from the board


def on_screen(page, cell, width: int) -> None:  # type: ignore[no-untyped-def]
    """The key number is in view without scrolling sideways."""
    box = cell.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, (box, width)
    assert re.search(r"\d", cell.inner_text())
