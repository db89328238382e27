"""`torchmark board` on a real uvicorn (loopback, a free port) and `torchmark submit` to it;
the token commands; `submit --dry-run`; an unreachable server."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from boardtest import free_port, make_run, start_server, stop, survives_sigkill
from clitest import cli
from torchmark.store.exchange import export_run


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.json"
    path.write_text(export_run(make_run()), encoding="utf-8")
    return path


@pytest.fixture
def served(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[tuple[str, str]]:
    """(URL, token) of `torchmark board` running in a child process."""
    db = f"sqlite:///{tmp_path / 'board.db'}"
    code, out, _ = cli(capsys, "board", "token", "create", "ci", "--db", db)
    assert code == 0
    proc, url = start_server(db, tmp_path / "serve.log")
    try:
        yield url, out.strip().splitlines()[-1]
    finally:
        stop(proc)


def test_submit_to_a_real_server(
    served: tuple[str, str], run_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, token = served
    # placed only among the standard division's machines: say so when there are none
    code, out, err = cli(capsys, "compare", str(run_file), "--server", url)
    assert code == 0, err
    said = f"add/seed n=1000 on cpu: no machine in the standard division of {url} has this case"
    assert " ".join(out.split()) == said + " yet"
    code, out, err = cli(capsys, "submit", str(run_file), "--server", url, "--token", token)
    assert code == 0, err
    assert "stored on" in out
    code, out, _ = cli(capsys, "submit", str(run_file), "--server", url, "--token", token)
    assert code == 0 and "already there" in out
    # a submitted run is never its own competitor (it read "rank 1 of 2 ..., faster than
    # 0 % of them": itself as the server's one machine)
    code, out, err = cli(capsys, "compare", str(run_file), "--server", url)
    said = " ".join(out.split())
    assert code == 0 and "rank" not in said, said
    assert "placed among the other runs, not against itself" in said
    assert f"no other run in the standard division of {url} has this case yet" in said
    runs = json.loads(urllib.request.urlopen(url + "/api/v1/runs", timeout=10).read())
    assert len(runs) == 1
    sent = urllib.request.urlopen(f"{url}/api/v1/runs/{runs[0]['run_id']}", timeout=10).read()
    assert b"alice" not in sent and b"GPU-1234" not in sent
    code, _, err = cli(capsys, "submit", str(run_file), "--server", url, "--token", "tm_nope")
    assert code == 1 and "refused the run (401)" in err
    slower = tmp_path / "slower.json"
    slower.write_text(export_run(make_run("Slow", 2.0)), encoding="utf-8")
    code, out, err = cli(capsys, "compare", str(slower), "--server", url)
    assert code == 0, err
    assert "add/seed n=1000 on cpu: rank 2 of 2 (the server's 1 machine and" in out
    assert "faster than 0 % of them" in out


def test_dry_run_prints_exactly_what_would_be_sent(
    run_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "submit", str(run_file), "--dry-run")
    assert code == 0
    doc = json.loads(out)
    assert doc["environment"]["devices"]["cpu"]["model"] == "Test CPU 9000"
    assert "host" not in doc["environment"] and "alice" not in out
    assert "nothing sent" in err and "environment.env_vars.HOME" in err


def test_unreachable_server_is_one_clear_line(
    run_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, _, err = cli(capsys, "submit", str(run_file), "--server", url, "--token", "t")
    assert code == 1
    assert f"cannot reach {url}" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli(capsys, "compare", str(run_file), "--server", url)
    assert code == 1 and f"cannot reach {url}" in err


@pytest.mark.parametrize(
    ("command", "then"),
    [
        (["submit", "--token", "t"], "the run may not be stored: submit it again"),
        (["compare"], "nothing was stored: run the command again"),  # it only asks for a place
    ],
)
def test_an_answer_cut_short_is_one_clear_line(
    run_file: Path, capsys: pytest.CaptureFixture[str], command: list[str], then: str
) -> None:
    """A server that dies mid-answer (it promised 138 bytes, sent none: CI saw this when the
    board was killed under load) is one line saying what to do, not a traceback."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def answer_short() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(body) < length:  # read it all: no reset while the client still sends
                body += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 138\r\n\r\n")

    thread = threading.Thread(target=answer_short, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        code, _, err = cli(capsys, command[0], str(run_file), "--server", url, *command[1:])
    finally:
        thread.join(timeout=10)
        listener.close()
    assert code == 1
    assert f"{url} did not answer in full (IncompleteRead)" in err
    assert then in err and len(err.strip().splitlines()) == 1


def test_token_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'board.db'}"
    code, out, _ = cli(capsys, "board", "token", "create", "lab", "--db", db)
    token = out.strip().splitlines()[-1]
    assert code == 0 and token.startswith("tm_")
    code, out, _ = cli(capsys, "board", "token", "list", "--db", db)
    assert "lab" in out and "active" in out and token not in out
    assert cli(capsys, "board", "token", "revoke", "lab", "--db", db)[0] == 0
    assert "revoked" in cli(capsys, "board", "token", "list", "--db", db)[1]
    code, _, err = cli(capsys, "board", "token", "revoke", "lab", "--db", db)
    assert code == 2 and "no active token named 'lab'" in err
    code, _, err = cli(capsys, "board", "tokens", "--db", db)
    assert code == 2 and "token create NAME" in err
    # a missing NAME is named, in one line, as click names a command's missing argument
    code, _, err = cli(capsys, "board", "token", "revoke", "--db", db)
    assert code == 2 and err.count("\n") == 1
    assert "Missing argument 'NAME': `torchmark board token revoke NAME`" in err


def test_serve_is_the_old_name_of_board(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`serve` read like the load test `serving`: it says the new name in one line, then
    does what `board` does."""
    db = f"sqlite:///{tmp_path / 'board.db'}"
    code, out, err = cli(capsys, "serve", "token", "create", "old", "--db", db)
    assert code == 0 and out.strip().splitlines()[-1].startswith("tm_")
    assert (
        err
        == "`torchmark serve` is now `torchmark board` (`serving` is the load test); running it\n"
    )
    assert "old" in cli(capsys, "board", "token", "list", "--db", db)[1]


def test_concurrent_submitters_lose_nothing_and_duplicate_nothing(
    served: tuple[str, str],
) -> None:
    """40 distinct runs and 10 repeats sent by 20 threads at once: every acknowledged run is
    readable, the repeats are answered with the first id, no 5xx."""
    from concurrent.futures import ThreadPoolExecutor

    from torchmark.cli.submit import post

    url, token = served
    bodies = [export_run(make_run(scale=1 + i / 100)).encode() for i in range(40)]
    sends = bodies + bodies[:10]
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(lambda b: post(url, token, b), sends))
    ids = [a["run_id"] for a in answers]
    assert len(set(ids[:40])) == 40
    assert ids[40:] == ids[:10]
    runs = json.loads(urllib.request.urlopen(url + "/api/v1/runs", timeout=10).read())
    assert sorted(r["run_id"] for r in runs) == sorted(ids[:40])
    for run_id in ids[:40]:
        assert urllib.request.urlopen(f"{url}/api/v1/runs/{run_id}", timeout=10).status == 200


def test_acknowledged_runs_survive_sigkill(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The server killed with SIGKILL while 8 threads submit: after a restart every run it
    acknowledged is there, and the database opens cleanly."""
    db = f"sqlite:///{tmp_path / 'board.db'}"
    token = cli(capsys, "board", "token", "create", "ci", "--db", db)[1].strip().split()[-1]
    survives_sigkill(db, token, tmp_path / "serve.log")


def test_serve_refuses_several_workers_on_sqlite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'board.db'}"
    code, _, err = cli(capsys, "board", "--db", db, "--workers", "2")
    assert code != 0 and "--workers 2 needs a PostgreSQL store" in err
    assert "SQLite takes one writer at a time" in err and len(err.strip().splitlines()) <= 2
    code, _, err = cli(capsys, "board", "--db", db, "--workers", "0")
    assert code != 0 and "--workers 0: serve with at least 1 process" in err
    assert not (tmp_path / "board.db").exists()  # refused before anything was opened
