"""``torchmark submit``: send a stored run to a shared leaderboard (``torchmark board``)."""

from __future__ import annotations

import contextlib
import getpass
import http.client
import json
import os
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Annotated, Any

import typer

from torchmark.cli.app import DbOption, app, console, err_console, one_line, open_store
from torchmark.errors import InputError, ServerError

TIMEOUT_S = 60.0  # one request; a 2 MiB run document on a slow link takes seconds, not minutes


def _identity() -> tuple[str, ...]:
    """This host's and user's names: blanked out of every text sent."""
    words = {socket.gethostname(), socket.getfqdn()}
    # no user name in a container without an /etc/passwd entry
    with contextlib.suppress(KeyError, OSError):
        words.add(getpass.getuser())
    return tuple(sorted(w for w in words if w and w != "localhost"))


def document(run: str, db: str | None) -> tuple[dict[str, Any], list[str]]:
    """The run as it would be sent, and what was stripped from it."""
    from torchmark.store.exchange import export_run, import_run, is_file_spec
    from torchmark.web.strip import prepare

    if is_file_spec(run):
        record = import_run(run)
    else:
        with contextlib.closing(open_store(db)) as store:
            record = store.load(run)
    return prepare(json.loads(export_run(record)), _identity())


def predicted(doc: dict[str, Any]) -> str | None:
    """Why a prediction is not submitted (``verdicts.prediction_refusal``), else None."""
    from torchmark.judge.verdicts import is_prediction, prediction_refusal
    from torchmark.store.exchange import parse_document

    if not is_prediction(str(doc.get("kind"))):
        return None
    return prediction_refusal(parse_document(doc, "the run"), "submit")


SUBMIT_PATH = "/api/v1/runs"
RESEND = "the run may not be stored: submit it again"


def post(
    server: str, token: str | None, body: bytes, path: str = SUBMIT_PATH, cut_short: str = RESEND
) -> Any:
    """The server's JSON answer to ``body``; ``cut_short`` says what to do where the answer
    was cut short (a run id is stored once, so sending a run again is safe)."""
    url = server.rstrip("/") + path
    if not url.startswith(("http://", "https://")):
        raise InputError(f"--server {server!r}: give an http:// or https:// URL")
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"}
        | ({"Authorization": f"Bearer {token}"} if token else {}),
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        try:
            detail = json.loads(e.read()).get("detail", "")
        except (ValueError, AttributeError):
            detail = ""
        raise ServerError(f"{server} refused the run ({e.code}): {detail or e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ServerError(
            f"cannot reach {server} ({reason}); check the URL and that the server runs"
        ) from None
    except (http.client.HTTPException, ValueError) as e:
        # the connection dropped mid-answer (IncompleteRead, RemoteDisconnected) or the answer
        # is not JSON: the server may or may not have done what was asked
        raise ServerError(
            f"{server} did not answer in full ({type(e).__name__}); {cut_short}"
        ) from None


@app.command()
def submit(
    run: Annotated[str, typer.Argument(help="Run id, latest, or an exported .json file.")],
    server: Annotated[
        str | None, typer.Option(help="The leaderboard's URL (torchmark board).")
    ] = None,
    token: Annotated[
        str | None, typer.Option(help="Submit token; default $TORCHMARK_TOKEN.")
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print the exact JSON to be sent; send nothing."),
    ] = False,
    db: DbOption = None,
) -> None:
    """Send a run to a shared leaderboard, without host or user identifiers (--dry-run shows it)."""
    doc, removed = document(run, db)
    refused = predicted(doc)
    if refused:  # before anything is printed or sent, --dry-run too
        raise InputError(refused)
    body = json.dumps(doc, indent=2, allow_nan=False)
    if dry_run:
        sys.stdout.write(body + "\n")
        err_console.print(
            "dry run: nothing sent. Removed: " + (", ".join(removed) or "nothing"),
            soft_wrap=one_line(err_console),
        )
        for line in server_lines(doc):
            err_console.print(line, soft_wrap=one_line(err_console))
        return
    if not server:
        raise InputError("give --server URL (or --dry-run to see what would be sent)")
    token = token or os.environ.get("TORCHMARK_TOKEN")
    if not token:
        raise InputError("give --token or set TORCHMARK_TOKEN (torchmark board token create NAME)")
    answer = post(server, token, body.encode())
    run_id = answer.get("run_id")
    if answer.get("duplicate"):
        # the first submission's standing: the duplicate answer carries only its id
        answer |= get(server, token, f"/api/v1/runs/{run_id}/summary")
    what = "already there" if answer.get("duplicate") else "stored"
    url = urllib.parse.urljoin(server.rstrip("/") + "/", str(answer.get("url") or ""))
    console.print(f"run {run_id} {what} on {server}: {url}", soft_wrap=one_line(console))
    for line in standing(answer):
        console.print(line, soft_wrap=one_line(console))


def standing(answer: dict[str, Any]) -> list[str]:
    """What the board said of a stored run: its division (and why a custom run is custom),
    and results it will not rank."""
    division = answer.get("division")
    if not division:
        return []  # an older server: no standing in its answer
    out = [f"division: {division}"]
    why = answer.get("why_custom") or []
    if division == "custom":
        out[0] += f" ({', '.join(why)})" if why else ""
        out.append(
            "  the standard division ranks `torchmark run` of the built-in suite at its "
            "default options; custom runs rank among custom runs of the same case"
        )
    out += [f"not ranked: {reason}" for reason in answer.get("unranked") or []]
    return out


def get(server: str, token: str | None, path: str) -> Any:
    """GET ``path`` on the board (JSON); {} when it cannot be read (an older server)."""
    req = urllib.request.Request(
        server.rstrip("/") + path, headers={"Authorization": f"Bearer {token}"} if token else {}
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return {}


def server_lines(doc: dict[str, Any]) -> list[str]:
    """What the server will do with the run: refuse it (its bounds, named), or store it and
    rank, mark or only list each result by its verdict (``verdicts``)."""
    from torchmark.format import plural, result_label
    from torchmark.judge import verdicts
    from torchmark.store.exchange import parse_document
    from torchmark.web import admission, plausible, serving
    from torchmark.web.ranking import division_of

    run = parse_document(doc, "the run")  # read once already: not written and read again
    refused = admission.refusal(run)  # the server's own rule
    if refused:
        return [f"the server will refuse this run: {refused}"]
    # every verdict as the server judges it
    run = plausible.rejudged(admission.user_cases(admission.bounded_errors(serving.rederive(run))))
    rows = serving.rows_of(run, "")  # a serving run: its devices' answers
    if rows:
        return [f"the server will store it in the {division_of(run)} division"] + [
            f"{r.device}: max {r.limit} req/s ({r.said}): {verdicts.RULES[r.kind].server}"
            for r in rows
        ]
    unverified = plausible.unverified(run)
    by: dict[str, list[str]] = {}
    for i, r in enumerate(run.results):
        kind = verdicts.kind_of(r)
        said = "" if kind == "ok" else f" ({verdicts.says(r)})"
        if i in unverified and verdicts.may(r, "rank"):  # its verdict would rank it: not so
            never = verdicts.RULES["invalid"].server
            by.setdefault(never, []).append(f"{result_label(r)} (unverified)")
            continue
        by.setdefault(verdicts.RULES[kind].server, []).append(result_label(r) + said)
    lines = [f"the server will store it in the {division_of(run)} division"]
    for what, cases in by.items():
        lines.append(
            f"{what}: {plural(len(cases), 'result')}"
            + ("" if what == "ranked" else ": " + "; ".join(cases))
        )
    return lines


def place_on_server(specs: list[str], server: str, db: str | None) -> None:
    """``compare RUN --server URL``: each case of RUN ranked among the server's machines."""
    from torchmark.format import case_label, pct, plural

    if len(specs) > 1:
        raise InputError("--server places one run; give one run id, latest or a .json file")
    doc, _ = document(specs[0] if specs else "latest", db)
    body = json.dumps(doc, allow_nan=False).encode()
    token = os.environ.get("TORCHMARK_TOKEN")
    # a place asked for, no more: nothing is stored
    rows = post(server, token, body, "/api/v1/place", "nothing was stored: run the command again")
    if not rows:
        console.print("the run has no measured result to place")
    own = next((row["left_out"] for row in rows if row.get("left_out")), None)
    if own:  # placed among the others: a run is never its own competitor
        console.print(
            f"this run is on {server} as {own}: placed among the other runs, not against itself",
            soft_wrap=one_line(console),
        )
    elif any(row.get("machine_left_out") for row in rows):  # nor its machine's other runs
        console.print(
            f"this machine has runs on {server}: placed among the other machines, not "
            "against its own",
            soft_wrap=one_line(console),
        )
    for row in rows:
        label = case_label(row["variant"], row["params"], row["workload"], row["device"])
        division = row.get("division", "standard")  # an older server places in standard
        if row.get("rank") is None and row.get("why"):  # its verdict keeps it off rankings
            console.print(f"{label}: not placed: {row['why']}", soft_wrap=one_line(console))
            continue
        if not row["machines"]:
            who = "other run" if own else "machine"
            who = (
                "other machine" if not own and any(r.get("machine_left_out") for r in rows) else who
            )
            console.print(
                f"{label}: no {who} in the {division} division of {server} has this case yet",
                soft_wrap=one_line(console),
            )
            continue
        console.print(
            f"{label}: rank {row['rank']} of {row['machines'] + 1} (the server's "
            f"{plural(row['machines'], 'machine')} and this run), faster than "
            f"{pct(row['faster_than_pct'])} of them, in the {division} division",
            soft_wrap=one_line(console),
        )
