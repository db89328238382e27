"""The HTML report in a real browser: headless Debian chromium driven by Playwright.

Checks that every chart is drawn with a non-zero size and that opening the page makes no
request that leaves it (no CDN, no font, no image: the file must work offline). The
screenshot lands in the pytest tmp dir for a person to look at.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torchmark.report import html
from torchmark.results import RunRecord

CHROMIUM = "/usr/bin/chromium"
RUNS = Path(__file__).parents[1] / "fixtures" / "runs"

pytestmark = pytest.mark.browser


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


def open_report(browser, tmp_path: Path, names: list[str]):  # type: ignore[no-untyped-def]
    runs = [RunRecord.model_validate_json((RUNS / f"{n}.json").read_text()) for n in names]
    page_file = tmp_path / "report.html"
    page_file.write_text(html.render(runs), encoding="utf-8")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    outside: list[str] = []

    def route(r):  # type: ignore[no-untyped-def]
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(page_file.as_uri())
    page.wait_for_load_state("load")
    return page, outside


def test_charts_are_drawn_and_nothing_leaves_the_page(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    page, outside = open_report(browser, tmp_path, ["cpu-gpu"])
    sizes = page.evaluate(
        "() => Array.from(document.querySelectorAll('svg.chart'))"
        ".map(s => { const r = s.getBoundingClientRect(); return [r.width, r.height]; })"
    )
    assert len(sizes) == 6
    assert all(w > 100 and h > 100 for w, h in sizes), sizes
    # Each chart draws marks: paths for lines, bars and points.
    paths = page.evaluate(
        "() => Array.from(document.querySelectorAll('svg.chart'))"
        ".map(s => s.querySelectorAll('path').length)"
    )
    assert all(n > 5 for n in paths), paths
    assert outside == []
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    page.close()


def test_missing_charts_show_their_reason(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    page, outside = open_report(browser, tmp_path, ["cpu-only"])
    notes = page.locator(".nochart").all_inner_texts()
    assert any("no telemetry recorded" in n for n in notes)
    assert len(notes) == 6  # this CPU-only fixture has data for none of the charts
    assert outside == []
    page.close()
