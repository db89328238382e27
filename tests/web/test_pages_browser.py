"""Every leaderboard page as its users see it, in Debian chromium via Playwright: no page
scrolls sideways on a 390 px phone (wide tables scroll in their own box), each has a title,
a language, a viewport and one heading, every link on it answers, the ranking's sort
headings work from the keyboard and say their state in aria-sort, and errors are pages
with a way back. One server for the module, reports drawn in threads."""

from __future__ import annotations

import gzip
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from test_leaderboard_browser import serving, submit

from boardtest import make_run
from torchmark.results import RunRecord
from torchmark.store.exchange import export_run, import_run
from torchmark.web.reports import Reports, render_page

pytestmark = pytest.mark.browser

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
PHONE = {"width": 390, "height": 844}
USER_CASE = "model 24,330 params, 1.402e+06 FLOP/item on float32[1, 3, 16, 16]/e2e/batch=1"


def user_model() -> RunRecord:
    """A `torchmark model` run of a file with a long name (the board names its cases by
    the model's fingerprint: USER_CASE)."""
    from datetime import timedelta

    run = import_run(RUNS / "v1-model.json")
    spec = "a_rather_long_directory/model_file.py:make_model_factory"
    run.results = [r.model_copy(update={"workload": spec}) for r in run.results]
    run.finished_utc = run.created_utc + timedelta(hours=1)
    return run


HELD = "Held CPU"  # the run whose report drawing waits on the gate (the 503 page)


class Board:
    def __init__(self, url: str, app: Any, ids: dict[str, str], gate: threading.Event) -> None:
        self.url, self.app, self.ids, self.gate = url, app, ids, gate

    def pages(self) -> dict[str, str]:
        run = self.ids["cpu-gpu"]
        _, machine = self.app.state.accounts.submitted(run)
        return {
            "index": "/",
            "case": "/?case=" + urllib.request.quote('["add", "seed", "{\\"n\\": 1000}"]'),
            # the custom division, a user model's case among its cases (the longest names)
            "custom": "/?division=custom",
            "custom user model": "/?"
            + urllib.parse.urlencode({"case": USER_CASE, "division": "custom"}),
            "run": f"/runs/{run}",
            "report": f"/runs/{run}/report",
            "machine": f"/machines/{machine}",
            "404": "/runs/no-such-run",
        }


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Board]:
    from torchmark.web.app import create_app

    gate = threading.Event()

    def render(run: RunRecord) -> bytes:
        if HELD in export_run(run):
            gate.wait(timeout=30)
            return gzip.compress(b"<p>held</p>")
        return render_page(run)

    app = create_app(f"sqlite:///{tmp_path_factory.mktemp('pages') / 'board.db'}")
    app.state.reports = Reports(
        app.state.accounts.engine, render=render, pool=lambda n: ThreadPoolExecutor(n)
    )
    token = app.state.accounts.create_token("pages")
    with serving(app) as url:
        ids = {
            name: submit(url, token, (RUNS / f"{name}.json").read_bytes())
            for name in ("cpu-gpu", "cpu-only", "cpu-gpu-slower", "model-cpu-gpu")
        }
        for i, run in enumerate((make_run("Fast CPU", 1.0), make_run("Slow CPU", 3.0))):
            ids[f"made{i}"] = submit(url, token, export_run(run).encode())
        ids["held"] = submit(url, token, export_run(make_run(HELD, 2.0)).encode())
        # a user model: its case named by its fingerprint, the longest name in the select
        # (the custom division's page was 531 px wide on a 390 px phone)
        ids["user"] = submit(url, token, export_run(user_model()).encode())
        yield Board(url, app, ids, gate)
        gate.set()


def test_every_page_fits_a_phone_and_says_what_it_is(browser, board: Board) -> None:  # type: ignore[no-untyped-def]
    page = browser.new_page(viewport=PHONE)
    for name, path in board.pages().items():
        response = page.goto(board.url + path)
        assert response is not None
        assert response.status == (404 if name == "404" else 200), name
        wide = page.evaluate("document.scrollingElement.scrollWidth")
        assert wide <= page.evaluate("innerWidth"), f"{name} scrolls sideways: {wide} px"
        assert page.title().strip(), name
        assert page.locator("html").get_attribute("lang") == "en", name
        assert "width=device-width" in (
            page.locator("meta[name=viewport]").get_attribute("content") or ""
        ), name
        assert page.locator("h1").count() == 1 and page.locator("h1").inner_text().strip()
        # a table wider than the phone scrolls inside its box, which the keyboard can reach
        for box in page.locator("div.scroll").all():
            assert box.get_attribute("tabindex") == "0" and box.get_attribute("aria-label")
    page.close()


def test_numbers_are_right_aligned_in_tabular_figures(browser, board: Board) -> None:  # type: ignore[no-untyped-def]
    page = browser.new_page()
    for name in ("case", "run"):
        page.goto(board.url + board.pages()[name])
        styles = page.evaluate(
            "() => Array.from(document.querySelectorAll('td.num, th.num')).map(e => {"
            " const s = getComputedStyle(e); return [s.textAlign, s.fontVariantNumeric]; })"
        )
        assert styles and all(s == ["right", "tabular-nums"] for s in styles), (name, styles)
    page.close()


def test_every_link_on_every_page_answers(browser, board: Board) -> None:  # type: ignore[no-untyped-def]
    page = browser.new_page()
    seen: set[str] = set()
    for name, path in board.pages().items():
        if name == "report":  # the report's own page has no links to follow
            continue
        page.goto(board.url + path)
        for href in page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)"):
            assert href.startswith(board.url), f"{name} links off the board: {href}"
            if href not in seen:
                seen.add(href)
                status = page.request.get(href).status
                assert status == 200, f"{name}: {href} answers {status}"
    assert len(seen) > 10
    page.close()


def order(page) -> list[str]:  # type: ignore[no-untyped-def]
    texts = page.locator("#board tbody tr td:nth-child(2)").all_inner_texts()
    return [t.split(" (")[0] for t in texts]


def test_sort_headings_work_from_the_keyboard(browser, board: Board) -> None:  # type: ignore[no-untyped-def]
    page = browser.new_page()
    page.goto(board.url + board.pages()["case"])
    ranked = order(page)
    assert ranked == ["Fast CPU", "Held CPU", "Slow CPU"]
    assert page.locator("#board th[aria-sort]").count() == 0  # the ranked order: none sorted
    median = page.locator("#board th[data-sort=median]")
    for _ in range(40):  # Tab from the top of the page until the heading's link has focus
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.closest('th')?.dataset.sort") == "median":
            break
    else:
        pytest.fail("the median heading cannot be reached with Tab")
    page.keyboard.press("Enter")
    assert order(page) == ranked[::-1] and median.get_attribute("aria-sort") == "ascending"
    page.keyboard.press("Enter")  # focus stays on the heading: again reverses it
    assert order(page) == ranked and median.get_attribute("aria-sort") == "descending"
    assert page.locator("#board th[aria-sort]").count() == 1
    # the state is also drawn, not only announced: an arrow after the sorted heading
    arrow = page.evaluate(
        "getComputedStyle(document.querySelector('th[data-sort=median] a'), '::after').content"
    )
    assert "▼" in arrow
    page.close()


def test_errors_are_pages_with_a_way_back(browser, board: Board) -> None:  # type: ignore[no-untyped-def]
    page = browser.new_page(viewport=PHONE)
    for path in ("/runs/no-such-run", "/no/such/page", "/machines/none"):
        response = page.goto(board.url + path)
        assert response is not None and response.status == 404
        assert page.title().startswith("404") and page.locator("h1").inner_text() == (
            "404 Not Found"
        )
        assert page.locator("a[href='/']").count() >= 1
    # the API keeps answering JSON, to a browser too
    response = page.goto(board.url + "/api/v1/runs/no-such-run")
    assert response is not None and response.headers["content-type"] == "application/json"
    # a report still being drawn: 503, when to come back, and the page fits the phone
    reports: Reports = board.app.state.reports
    reports.wait_s = 0.2
    try:
        response = page.goto(f"{board.url}/runs/{board.ids['held']}/report")
    finally:
        reports.wait_s = 60.0
        board.gate.set()
    assert response is not None and response.status == 503
    assert response.headers["retry-after"] == "5" and "reload this page in 5 s" in (
        page.locator("main").inner_text()
    )
    assert page.evaluate("document.scrollingElement.scrollWidth <= innerWidth")
    page.close()
