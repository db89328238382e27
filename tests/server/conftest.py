"""The leaderboard test server: an app on a fresh SQLite file."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from torchmark.web.accounts import Accounts
from torchmark.web.app import create_app


@pytest.fixture
def server(tmp_path: Any) -> tuple[TestClient, str, Accounts]:
    """An app on a fresh SQLite file, its client and one active token."""
    app = create_app(f"sqlite:///{tmp_path / 'board.db'}", rate_limit=5)
    accounts: Accounts = app.state.accounts
    token = accounts.create_token("alice")
    return TestClient(app), token, accounts
