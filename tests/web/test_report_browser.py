"""The HTML report in a real browser: headless Debian chromium driven by Playwright.

Checks that every chart is drawn with a non-zero size and that opening the page makes no
request that leaves it (no CDN, no font, no image: the file must work offline). The
screenshot lands in the pytest tmp dir for a person to look at.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from torchmark.report import html
from torchmark.results import RunRecord
from torchmark.results.payloads import TunePayload

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"

pytestmark = pytest.mark.browser


def load(name: str) -> RunRecord:
    return RunRecord.model_validate_json((RUNS / f"{name}.json").read_text())


def open_report(browser, tmp_path: Path, names: list[str] | list[RunRecord], width: int = 1280):  # type: ignore[no-untyped-def]
    runs = [load(n) if isinstance(n, str) else n for n in names]
    page_file = tmp_path / "report.html"
    page_file.write_text(html.render(runs), encoding="utf-8")
    page = browser.new_page(viewport={"width": width, "height": 900})
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
    assert len(sizes) == 8
    assert all(w > 100 and h > 100 for w, h in sizes), sizes
    # The seed table: this machine's rows are drawn among the blog's, in the page's width.
    mine = page.locator("#chart-seed_table svg text", has_text="(this machine)")
    assert mine.count() == 2 and mine.first.is_visible()
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
    # A CPU-only run: % of ceiling and the seed table are drawn; the rest say why, once each.
    assert page.locator("svg.chart").count() == 2
    notes = page.locator("#not-drawn li").all_inner_texts()
    assert len(notes) == 6
    assert any("no telemetry recorded" in n for n in notes)
    assert outside == []
    page.close()


def test_a_flag_explains_itself_on_hover(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    page, outside = open_report(browser, tmp_path, ["cpu-only"])
    pill = page.locator(".badge", has_text="above ceiling").first
    assert "measured ceiling" in (pill.get_attribute("title") or "")
    pill.hover()  # the title is the browser's own tooltip: no script needed
    assert outside == []
    page.close()


def test_tune_recommendation_reads_in_the_page(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = load("cpu-only")
    run.kind = "tune"
    run.payload = TunePayload(
        recommendation={
            "cpu": {"name": "threads=1", "speedup": 1.2, "code": ["torch.set_num_threads(1)"]}
        }
    )
    page, outside = open_report(browser, tmp_path, [run])
    code = page.locator("pre.code")
    assert code.is_visible() and code.inner_text() == "torch.set_num_threads(1)"
    assert outside == []
    page.close()


# Where each verdict cell lies: inside the viewport, or inside a box of its own that scrolls
# sideways (and is itself inside the viewport); and the page itself never scrolls sideways.
VERDICT_CELLS = """() => {
  const out = [];
  const rows = 'table.results tbody tr:not(.workload) td:last-child';
  for (const td of document.querySelectorAll(rows)) {
    const r = td.getBoundingClientRect();
    let box = td.parentElement;
    while (box && getComputedStyle(box).overflowX !== 'auto') box = box.parentElement;
    const b = box ? box.getBoundingClientRect() : null;
    out.push({inView: r.left >= 0 && r.right <= innerWidth,
              inBox: !!b && b.left >= 0 && b.right <= innerWidth
                     && r.right <= b.left + box.scrollWidth + 1});
  }
  return out;
}"""

# Each chart text's size as drawn on the screen: its font size times the scale the SVG is
# drawn at (getComputedStyle alone reads the size in the chart's own units).
CHART_TEXT_PX = """() => Array.from(document.querySelectorAll('svg.chart text')).map(t => {
  const m = t.getScreenCTM();
  return parseFloat(getComputedStyle(t).fontSize) * Math.sqrt(Math.abs(m.a * m.d - m.b * m.c));
})"""


def test_on_a_phone_verdicts_are_reachable_and_chart_text_is_readable(
    browser, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    page, outside = open_report(browser, tmp_path, ["cpu-gpu"], width=390)
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    cells = page.evaluate(VERDICT_CELLS)
    assert cells and all(c["inView"] or c["inBox"] for c in cells), cells
    # the results reflow: each verdict on the screen itself, not in a box scrolled sideways
    assert all(c["inView"] for c in cells), cells
    sizes = page.evaluate(CHART_TEXT_PX)
    assert len(sizes) > 50 and min(sizes) >= 9, sorted(sizes)[:5]
    assert outside == []
    page.screenshot(path=str(tmp_path / "phone.png"), full_page=True)
    page.close()
