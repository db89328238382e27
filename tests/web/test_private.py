"""`torchmark board --private`: every path needs a token to read, the static files and the
OpenAPI document included; a public server serves both to anyone."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from torchmark.web.app import create_app

PATHS = ("/static/board.js", "/static/style.css", "/api/v1/openapi.json", "/", "/api/v1/runs")


def test_private_covers_static_files_and_the_api_document(tmp_path: Path) -> None:
    app = create_app(f"sqlite:///{tmp_path / 'p.db'}", private=True)
    token = app.state.accounts.create_token("team")
    client = TestClient(app)
    for path in (*PATHS, "/docs", "/redoc", "/runs/nope", "/static/nope.js"):
        r = client.get(path)
        assert r.status_code == 401, path
        assert "Bearer" in r.json()["detail"] and r.headers["WWW-Authenticate"] == "Bearer"
        assert "default-src 'none'" in r.headers["Content-Security-Policy"]
        wrong = client.get(path, headers={"Authorization": "Bearer tm_wrong"})
        assert wrong.status_code == 401, path
    browser = client.get("/", headers={"Accept": "text/html,*/*;q=0.8"})  # a page, not JSON
    assert browser.status_code == 401 and "<h1>401 Unauthorized</h1>" in browser.text
    assert browser.headers["WWW-Authenticate"] == "Bearer" and "board token create" in browser.text
    good = {"Authorization": f"Bearer {token}"}
    for path in PATHS:
        assert client.get(path, headers=good).status_code == 200, path
    assert "sortRows" in client.get("/static/board.js", headers=good).text
    # no docs page at all (FastAPI's loads its script from a CDN), token or not
    for path in ("/docs", "/redoc", "/static/nope.js"):
        assert client.get(path, headers=good).status_code == 404, path
    app.state.accounts.revoke_token("team")
    assert client.get("/static/board.js", headers=good).status_code == 401


def test_a_public_server_serves_them_to_anyone(tmp_path: Path) -> None:
    client = TestClient(create_app(f"sqlite:///{tmp_path / 'o.db'}"))
    for path in PATHS:
        assert client.get(path).status_code == 200, path


def test_the_report_page_may_style_inline_and_run_nothing(tmp_path: Path) -> None:
    from boardtest import body, make_run

    app = create_app(f"sqlite:///{tmp_path / 'r.db'}")
    token = app.state.accounts.create_token("t")
    client = TestClient(app)
    r = client.post(
        "/api/v1/runs", content=body(make_run()), headers={"Authorization": f"Bearer {token}"}
    )
    page = client.get(f"/runs/{r.json()['run_id']}/report")
    assert page.status_code == 200 and "Test CPU 9000" in page.text
    csp = page.headers["Content-Security-Policy"].split("; ")
    # no script-src: default-src 'none' forbids every script, and the sandbox runs none
    assert csp[0] == "sandbox" and "default-src 'none'" in csp
    assert not any(d.startswith(("script-src", "connect-src")) for d in csp)
    # the other pages keep the app's own policy
    assert (
        "script-src 'self'"
        in client.get(f"/runs/{r.json()['run_id']}").headers["Content-Security-Policy"]
    )
    assert client.get("/runs/nope/report").status_code == 404
