"""Which rows the board ranks, against their model's population and the hardware
catalogue (``web.population``): a machine far from the others of its model, an
uncatalogued device above every catalogued one, or a rate above what torchmark measured on
the same model is held out of the ranking with why, until another submitter confirms it;
a model no other machine has is ranked, marked provisional."""

from __future__ import annotations

from fastapi.testclient import TestClient

from boardtest import body, make_run
from torchmark.web.accounts import Accounts
from torchmark.web.population import Entry, standing

H100 = "NVIDIA H100 80GB HBM3"
ADD_GPU_BYTES = 805306368.0  # add float32 n=64M: 3 x 4 bytes an element


def entry(machine: str, model: str, seconds: float, who: str = "a", **kw: object) -> Entry:
    return Entry(machine, "cpu", model, seconds, frozenset({who}), **kw)  # type: ignore[arg-type]


def test_a_machine_far_from_its_models_population_is_held_out() -> None:
    rows = [entry(f"m{i}", "X", 1e-3 * (1 + i / 100)) for i in range(3)]
    rows.append(entry("forged", "X", 1e-4))
    out = standing(rows)
    held, why = out[3]
    assert held and why.startswith("unconfirmed: 10.1x faster than the median of 3 other X")
    assert all(i not in out for i in range(3))


def test_another_submitters_reproduction_confirms_it() -> None:
    rows = [entry(f"m{i}", "X", 1e-3) for i in range(3)]
    rows += [entry("fast1", "X", 1e-4, "b"), entry("fast2", "X", 1.1e-4, "c")]
    assert standing(rows) == {}
    # the same submitter's second machine is no reproduction
    rows[-1] = entry("fast2", "X", 1.1e-4, "b")
    assert standing(rows)[3][0] and standing(rows)[4][0]


def test_a_close_population_is_not_split_by_noise() -> None:
    """Identical times make a MAD of 0: the floor keeps a machine 1.5x slower ranked (a
    first place 1.5x ahead waits for a reproduction: its own rule)."""
    rows = [entry(f"m{i}", "X", 1e-3) for i in range(5)] + [entry("m5", "X", 1e-3 * 1.5)]
    assert standing(rows) == {}
    rows[-1] = entry("m5", "X", 1e-3 / 1.5)
    assert standing(rows)[5][1].startswith("unconfirmed: would take first place 1.5x faster")


def test_a_model_no_one_else_has_is_provisional() -> None:
    out = standing([entry("m0", "X", 1e-3), entry("m1", "Y", 1e-3)])
    assert out[0] == (False, "provisional: no other machine with a X has this case yet")
    assert not out[1][0]


def test_an_uncatalogued_device_never_ranks_above_every_catalogued_one() -> None:
    rows = [
        entry("epyc", "AMD EPYC 9654 96-Core Processor", 1e-3),
        entry("odd", "Made-up CPU 1", 5e-4),
        entry("slow", "Made-up CPU 2", 2e-3),
    ]
    out = standing(rows)
    assert out[1][0] and "Made-up CPU 1 is not in the hardware catalogue" in out[1][1]
    assert not out[2][0]  # below a catalogued device: ranked


def test_a_rate_above_what_torchmark_measured_on_the_model_is_held_out() -> None:
    def gpu(machine: str, gbs: float, who: str = "a") -> Entry:
        seconds = ADD_GPU_BYTES / (gbs * 1e9)
        return Entry(machine, "cuda:0", H100, seconds, frozenset({who}), "float32", 0.0,
                     ADD_GPU_BYTES)  # fmt: skip

    out = standing([gpu("real", 3000), gpu("forged", 4500)])
    assert out[1][0] and "above the 3.05e+12 torchmark measured on a H100 SXM" in out[1][1]
    assert 0 not in out or not out[0][0]
    # reproduced by another submitter's H100: ranked
    assert not standing([gpu("real", 3000), gpu("forged", 4500), gpu("b", 4400, "b")]).get(
        1, (False, "")
    )[0]


def test_held_rows_are_listed_unranked_with_why(
    server: tuple[TestClient, str, Accounts],
) -> None:
    client, token, _ = server
    auth = {"Authorization": f"Bearer {token}"}
    for i in range(3):
        run = make_run(scale=1.0 + i / 100)
        run.environment["software"]["torch"] = f"2.13.{i}"  # three machines of one model
        assert client.post("/api/v1/runs", content=body(run), headers=auth).status_code == 201
    forged = make_run(scale=0.1)
    forged.environment["software"]["torch"] = "9.9"
    stored = client.post("/api/v1/runs", content=body(forged), headers=auth).json()["run_id"]
    rows = client.get(
        "/api/v1/leaderboard",
        params={"workload": "add", "variant": "seed", "params": '{"n": 1000}'},
    ).json()
    assert [r["rank"] for r in rows[:3]] != [] and rows[-1]["runs"] == [stored]
    assert rows[-1]["held"] and rows[-1]["rank"] == ""
    assert rows[-1]["standing"].startswith("unconfirmed: 10.1x faster")
    assert all(not r["held"] for r in rows[:3])
    page = client.get("/?case=add/seed/n=1000").text
    assert "unconfirmed: 10.1x faster" in page
    # each run's page says where its results rank, or why not
    first = rows[0]["runs"][0]
    assert f">{rows[0]['rank']} of 3</a>" in client.get(f"/runs/{first}").text
    assert ">not ranked: unconfirmed: 10.1x faster" in client.get(f"/runs/{stored}").text
    # /place ranks a run among the ranked machines only
    newcomer = make_run(scale=0.5)
    newcomer.environment["software"]["torch"] = "8.0"
    placed = client.post("/api/v1/place", content=body(newcomer)).json()
    assert placed[0]["machines"] == 3 and placed[0]["rank"] == 1
