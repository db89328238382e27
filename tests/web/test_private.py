"""`torchmark serve --private`: every path needs a token to read, the static files and the
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
