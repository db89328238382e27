"""The leaderboard's pages in a real browser (Debian chromium via Playwright) against
`torchmark board`'s app on uvicorn (127.0.0.1, a free port, in a thread).

The table renders, a tie shows as a shared rank, the case selector changes the rows, a row
opens its run page and its machine page, a `<script>` / `onerror=` payload stays visible
text and never runs, and no request leaves the server."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from boardtest import make_run, serving, submit
from torchmark.store.exchange import export_run

PAYLOAD = '<script>alert(1)</script><img src=x onerror="alert(2)">'

pytestmark = pytest.mark.browser


def watched_page(browser, origin: str):  # type: ignore[no-untyped-def]
    """A new page that records every dialog a script opens and aborts (and records) every
    request leaving ``origin``: (page, outside URLs, dialog messages)."""
    page = browser.new_page()
    outside: list[str] = []
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

    def route(r):  # type: ignore[no-untyped-def]
        if r.request.url.startswith(origin):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    return page, outside, dialogs


@pytest.fixture
def board(tmp_path: Path) -> Iterator[str]:
    from torchmark.web.app import create_app

    app = create_app(f"sqlite:///{tmp_path / 'board.db'}")
    token = app.state.accounts.create_token("ci")
    with serving(app) as url:
        other = make_run("Other case CPU")
        other.results[0].params = {"n": 2000}
        for run in (
            make_run("Fast CPU", 1.0),
            make_run("Twin CPU", 1.001),
            make_run(PAYLOAD, 3.0, note=PAYLOAD),
            other,
        ):
            submit(url, token, export_run(run).encode())
        yield url


def test_the_board_in_a_browser(browser, board: str) -> None:  # type: ignore[no-untyped-def]
    page, outside, dialogs = watched_page(browser, board)
    page.goto(board + "/?case=" + urllib.request.quote('["add", "seed", "{\\"n\\": 1000}"]'))
    rows = page.locator("#board tbody tr")
    assert rows.count() == 3
    ranks = [rows.nth(i).locator("td.rank").inner_text() for i in range(3)]
    assert ranks == ["=1", "=1", "3"]
    assert PAYLOAD in rows.nth(2).inner_text()  # shown as text
    with page.expect_navigation():
        page.select_option("#case", label="add seed n=2000")  # board.js submits the form
    assert rows.count() == 1 and "Other case CPU" in rows.first.inner_text()
    with page.expect_navigation():
        page.go_back()
    page.locator("#board tbody tr").nth(2).locator("td").nth(2).locator("a").first.click()
    page.wait_for_url("**/runs/*")
    assert PAYLOAD in page.locator("table").inner_text()
    assert page.locator("img").count() == 0  # the payload's <img> was never made an element
    with page.expect_navigation():
        page.go_back()
    with page.expect_navigation():
        page.locator("#board tbody tr").first.locator("td").nth(1).locator("a").click()
    assert page.url.startswith(board + "/machines/")
    assert "Fast CPU" in page.locator("main").inner_text()
    assert dialogs == [] and outside == []


def order(page) -> list[str]:  # type: ignore[no-untyped-def]
    texts = page.locator("#board tbody tr td:nth-child(2)").all_inner_texts()
    return [next(n for n in ("Fast", "Twin", "<script>") if n in t) for t in texts]


def test_columns_sort_with_and_without_script(browser, board: str) -> None:  # type: ignore[no-untyped-def]
    case = board + "/?case=" + urllib.request.quote('["add", "seed", "{\\"n\\": 1000}"]')
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    csp = "Content Security Policy"
    page.on("console", lambda m: errors.append(m.text) if csp in m.text else None)
    page.goto(case)
    assert order(page) == ["Fast", "Twin", "<script>"]
    median = page.locator("#board th[data-sort=median]")
    page.evaluate("window.stillHere = true")  # gone if the click reloaded the page
    median.locator("a").click()  # board.js sorts in place: no navigation
    assert order(page) == ["<script>", "Twin", "Fast"]  # slowest first
    assert median.get_attribute("aria-sort") == "ascending" and "sort=median" in page.url
    median.locator("a").click()
    assert order(page) == ["Fast", "Twin", "<script>"]
    assert median.get_attribute("aria-sort") == "descending" and "sort=-median" in page.url
    page.locator("#board th[data-sort=rank] a").click()
    assert order(page) == ["Fast", "Twin", "<script>"] and "sort=rank" in page.url
    page.locator("#board th[data-sort=rank] a").click()
    assert order(page) == ["<script>", "Twin", "Fast"]
    assert page.evaluate("window.stillHere") is True
    page.reload()  # the server sorts as the script did
    assert order(page) == ["<script>", "Twin", "Fast"]
    assert page.locator("#board th[data-sort=rank]").get_attribute("aria-sort") == "descending"
    assert errors == []  # the CSP let board.js run and it threw nothing
    page.close()

    quiet = browser.new_context(java_script_enabled=False)
    page = quiet.new_page()
    page.goto(case)
    with page.expect_navigation():
        page.locator("#board th[data-sort=median] a").click()  # a plain link: the server sorts
    assert order(page) == ["<script>", "Twin", "Fast"] and "sort=median" in page.url
    with page.expect_navigation():
        page.locator("#board th[data-sort=median] a").click()
    assert order(page) == ["Fast", "Twin", "<script>"] and "sort=-median" in page.url
    quiet.close()


def test_a_run_page_opens_its_full_report(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from torchmark.web.app import create_app

    app = create_app(f"sqlite:///{tmp_path / 'board.db'}")
    token = app.state.accounts.create_token("ci")
    fixture = Path(__file__).parents[1] / "fixtures" / "runs" / "cpu-only.json"
    with serving(app) as url:
        run_id = submit(url, token, fixture.read_bytes())
        hostile = submit(url, token, export_run(make_run(PAYLOAD, note=PAYLOAD)).encode())
        page, outside, dialogs = watched_page(browser, url)
        page.goto(f"{url}/runs/{run_id}")
        assert "Division: standard" in page.locator("main").inner_text()
        with page.expect_navigation():
            page.locator("#report").click()
        assert page.url == f"{url}/runs/{run_id}/report"
        charts = page.locator("svg.chart")
        assert charts.count() == 2  # as `torchmark report` draws this run (the report tests)
        for i in range(2):
            box = charts.nth(i).bounding_box()
            assert box and box["width"] > 100 and box["height"] > 100
        assert page.locator("#not-drawn li").count() == 6
        page.goto(f"{url}/runs/{hostile}/report")
        assert PAYLOAD in page.locator("body").inner_text()
        assert page.locator("img").count() == 0
        assert dialogs == [] and outside == []
        page.close()
