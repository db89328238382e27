"""The two answers of a serving run, from stored documents: the model's capacity in
process and the model as served over HTTP; the verdict, count and cost from as served, the
front end's share between them, and how a run stored before as served reads."""

from __future__ import annotations

import pytest

from torchmark.kinds.serving import deployed, kind
from torchmark.kinds.serving.cores import CorePlan, plan
from torchmark.kinds.serving.served import served_splits, url_name
from torchmark.report.serving import lines
from torchmark.results.serving import FleetDoc, PointDoc, ServingPayload


def _fleet(within: float, over: float, **where: object) -> FleetDoc:
    def pt(rate: float, outcome: str) -> PointDoc:
        return PointDoc(rate=rate, max_batch=8, max_wait_s=0.0, outcome=outcome, why="")  # type: ignore[arg-type]

    doc = FleetDoc(device="cpu", label="cpu", points=[pt(within, "within"), pt(over, "over")])
    return deployed.answer.refresh(doc).model_copy(update=where)


def _analysed(p: ServingPayload) -> ServingPayload:
    return deployed.analyse(p, {"cpu": 0.36})


def test_the_verdict_count_and_cost_come_from_as_served_and_the_gap_is_said() -> None:
    p = ServingPayload(model="m", bound_s=0.05, rate=1000.0)
    p.fleets = [
        _fleet(10_000, 11_000),
        _fleet(100, 110, served="oip", model_workers=1, model_threads=1),
    ]
    p = _analysed(p)
    (a,) = p.answers
    (c,) = p.capacity
    assert (a.max_rate, a.fleet, a.needed) == (100, 1, 10)
    assert (c.max_rate, c.fleet, c.needed) == (10_000, 0, 1)
    assert a.cost_per_million == pytest.approx(0.36 / 3600 / 100 * 1e6)
    assert p.front_end == {"cpu": pytest.approx(0.99)}
    assert a.sentence.startswith("cpu as served (front end + 1 model worker x 1 thread): 100")
    assert c.sentence.startswith("cpu model capacity (in process): 10,000 req/s")
    said = lines(p)
    assert "cpu: the front end takes 99 % (100 req/s as served, 10,000 in process)" in said
    assert "verdict: at 1,000 req/s within 50 ms: cpu x 10 (3.60 an hour) (as served)" in said


def test_as_served_above_the_capacity_says_the_share_cannot_be_told() -> None:
    p = ServingPayload(model="m", bound_s=0.05)
    p.fleets = [_fleet(100, 110), _fleet(105, 120, served="oip", model_workers=0)]
    p = _analysed(p)
    assert p.front_end["cpu"] == pytest.approx(-0.05)
    assert any("the front end's share can't be told" in x for x in lines(p))


def test_a_run_stored_before_as_served_reads_as_it_did() -> None:
    p = ServingPayload.model_validate(
        {"model": "m", "bound_s": 0.05, "fleets": [_fleet(500, 550).model_dump()]}
    )
    assert p.fleets[0].served == "" and p.capacity == [] and p.front_end == {}
    p = _analysed(p)
    (a,) = p.answers
    assert a.sentence.startswith("cpu: 500 req/s")  # no "as served" / "capacity" said
    assert not any("front end" in x for x in lines(p))


def test_an_endpoints_answer_says_the_batching_is_the_servers() -> None:
    p = ServingPayload(model="m", bound_s=0.05, endpoint="http://h:1")
    f = _fleet(40, 45, served="endpoint", endpoint="http://h:1")
    p.fleets = [f.model_copy(update={"device": "endpoint", "label": "http://h:1"})]
    p = _analysed(p)
    (a,) = p.answers
    assert a.batching == "the server's own batching" and p.capacity == []
    assert a.sentence.startswith("endpoint at http://h:1: 40 req/s")


def test_the_cores_are_split_between_the_front_end_and_model_workers() -> None:
    assert served_splits(1) == [(0, 1)]
    assert served_splits(2) == [(0, 2), (1, 1)]
    assert served_splits(8) == [(0, 8), (1, 7), (2, 3), (4, 1)]
    assert url_name("resnet50") == "resnet50" and url_name("models.py:make") == "model"


def test_without_the_server_extra_serving_over_http_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    from torchmark.errors import InputError
    from torchmark.kinds.serving import served

    assert served.missing() is None  # the test extra has them
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda m, *a: None if m == "httptools" else real(m, *a)
    )
    assert served.missing() == "httptools not installed (pip install 'torchmark[server]')"
    with pytest.raises(InputError, match=r"not available: httptools not installed"):
        served.Endpoint("http://127.0.0.1:1", "m", 0.05)


def test_compare_sets_like_beside_like_in_process_when_one_run_has_no_as_served() -> None:
    from pathlib import Path

    from torchmark.report.serving import compare_table
    from torchmark.results import RunRecord
    from torchmark.results.serving import read, write

    fixture = Path(__file__).parents[1] / "fixtures" / "runs" / "serving-cpu.json"
    old = RunRecord.model_validate_json(fixture.read_text())
    new = old.model_copy(deep=True)
    p = read(new)
    assert p is not None
    capacity = p.answers[0]  # in process: 38.1-76.3
    served = capacity.model_copy(update={"max_rate": 5.0, "top": 6.0})
    p.answers, p.capacity = [served], [capacity]
    write(new, p)
    t, changes = compare_table([old, new])
    assert t.title == "in process" and [c[1] for c in changes] == ["UNCLEAR"]  # the same run
    t, changes = compare_table([new, new])
    assert t.title == "as served"


def test_a_server_that_does_not_start_is_said_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import contextlib
    from collections.abc import Iterator
    from typing import Any

    from torchmark.devices import resolve
    from torchmark.kinds.serving import generator, kind
    from torchmark.kinds.serving.fleet import Local
    from torchmark.kinds.serving.model import builtin
    from torchmark.kinds.serving.served import ServerError
    from torchmark.results.serving import read
    from torchmark.testing import FakeClock, FakeExecutor, MemoryStore

    monkeypatch.setattr(generator, "PER_RATE_S", 0.01)
    monkeypatch.setattr(generator, "RATES", (1_000,))
    clock = FakeClock(0.0)

    @contextlib.contextmanager
    def fleet(self: kind.Serving, device: Any, planned: Any, max_batch: int) -> Iterator[Local]:
        if planned.served:
            raise ServerError("torchmark's OIP server did not start: InputError: no tensors")
        yield Local(FakeExecutor(clock, 0.01), clock)

    monkeypatch.setattr(kind.Serving, "_fleet", fleet)
    cfg = kind.ServingConfig(
        "simplenet", 100, batches=(1,), budget_s=60, point_s=20, split=False, energy=False
    )
    run = kind.Serving(cfg, builtin("simplenet"), resolve(["cpu"]), MemoryStore(), clock=clock)
    p = read(run.run())
    assert p is not None
    assert [f.served for f in p.fleets] == ["", "oip"]
    assert p.fleets[1].stop_reason.startswith("not served: torchmark's OIP server did not")
    (a,) = p.answers  # as served: none, said why; the capacity kept beside it
    assert a.max_rate is None and "not served" in a.why_none
    assert p.capacity[0].max_rate is not None and p.front_end == {}


def _served_run() -> object:
    """The fixture run (a real tiny CPU run) as if it had also served the model over HTTP:
    a second fleet, as served, at a quarter of the in-process rates."""
    from pathlib import Path

    from torchmark.results import RunRecord
    from torchmark.results.serving import read, write

    fixture = Path(__file__).parents[1] / "fixtures" / "runs" / "serving-cpu.json"
    run = RunRecord.model_validate_json(fixture.read_text())
    p = read(run)
    assert p is not None
    inproc = p.fleets[0]
    points = [pt.model_copy(update={"rate": pt.rate / 4}) for pt in inproc.points]
    over = inproc.model_copy(
        update={"points": points, "served": "oip", "model_workers": 1, "model_threads": 1}
    )
    p.fleets = [inproc, deployed.answer.refresh(over)]
    write(run, _analysed(p))
    return run


def test_the_html_report_says_what_the_terminal_says_of_a_served_run() -> None:
    import html as html_lib
    import re

    from rich.console import Console

    from torchmark.report import html
    from torchmark.report.serving import answer_table, payload, serving_view

    run = _served_run()
    p = payload(run)  # type: ignore[arg-type]
    assert p is not None and p.capacity and p.front_end
    page = re.sub(r"<[^>]+>", " ", html.render([run]))  # type: ignore[list-item]
    text = re.sub(r"\s+", " ", html_lib.unescape(page))
    console = Console(width=80, record=True, highlight=False, markup=False)
    for t in (answer_table(p), answer_table(p, capacity=True)):
        assert t.title and t.title in text  # "as served", "model capacity (in process, ...)"
        console.print(t)
    numbers = set(re.findall(r"\d[\d,.]*(?:-\d[\d,.]*)?", console.export_text()))
    assert numbers
    cells = set(re.findall(r"\d[\d,.]*(?:-\d[\d,.]*)?", text))
    assert numbers <= cells, numbers - cells
    console = Console(width=200, record=True, highlight=False, markup=False)
    for part in serving_view(run):  # type: ignore[arg-type]
        if not hasattr(part, "columns"):  # every sentence and heading, word for word
            console.print(part, soft_wrap=True)
    said = [line for line in console.export_text().splitlines() if line.strip()]
    assert any("the front end takes" in line for line in said)
    missing = [line for line in said if re.sub(r"\s+", " ", line).strip() not in text]
    assert missing == []


def test_the_markdown_report_has_both_answers_of_a_served_run() -> None:
    from torchmark.report import markdown

    text = markdown.render([_served_run()])  # type: ignore[list-item]
    served, capacity = text.index("*as served*"), text.index("*model capacity (in process")
    assert served < capacity
    assert "| 9.53 | 19.1 |" in text[served:capacity] and "| 38.1 | 76.3 |" in text[capacity:]


def test_a_limit_with_nothing_measured_above_it_reads_at_least_everywhere() -> None:
    from rich.console import Console

    from torchmark.report.serving import answer_table, payload

    p = payload(_served_run())  # type: ignore[arg-type]
    assert p is not None
    p.answers[0] = p.answers[0].model_copy(update={"top": None})
    console = Console(width=80, record=True, highlight=False, markup=False)
    console.print(answer_table(p))
    assert ">= 9.53" in console.export_text()


# -- the cores the load generator and the server run on --------------------------------------


def test_the_client_gets_the_last_allowed_core_and_the_server_the_rest() -> None:
    sixteen = plan(range(16), pinnable=True)
    assert sixteen.client == (15,) and sixteen.server == tuple(range(15))
    assert sixteen.server_cores == 15 and sixteen.note == ""
    three = plan({0, 1, 2}, pinnable=True)
    assert (three.client, three.server) == ((2,), (0, 1))
    odd = plan({9, 2, 7, 3}, pinnable=True)  # a cpuset with holes: taskset -c 2,3,7,9
    assert (odd.client, odd.server, odd.server_cores) == ((9,), (2, 3, 7), 3)
    two = plan({0, 1}, pinnable=True)
    assert two.client == two.server == () and two.server_cores == 2
    assert two.note == (
        "the load generator shares the 2 cores with the server (a machine with 3 or more "
        "gives it one of its own)"
    )
    assert "the 1 core with" in plan({4}, pinnable=True).note
    mac = plan(range(16), pinnable=False)  # no sched_setaffinity: unpinned, and said
    assert mac.client == mac.server == () and mac.server_cores == 16
    assert "not pinned" in mac.note and "sched_setaffinity" in mac.note


def _serving(cores: CorePlan, **cfg: object) -> kind.Serving:
    from torchmark.devices import resolve
    from torchmark.kinds.serving.model import builtin
    from torchmark.testing import MemoryStore

    config = kind.ServingConfig(
        "simplenet",
        100,
        batches=(1,),
        budget_s=60,
        point_s=20,
        energy=False,
        **cfg,  # type: ignore[arg-type]
    )
    return kind.Serving(config, builtin("simplenet"), resolve(["cpu"]), MemoryStore(), cores=cores)


def test_the_served_splits_are_searched_over_the_servers_cores_only() -> None:
    from torchmark.devices import resolve

    (cpu,) = resolve(["cpu"])
    sixteen = plan(range(16), pinnable=True)
    assert _serving(sixteen)._served_splits(cpu) == served_splits(15)
    assert served_splits(15) == [(0, 15), (1, 14), (2, 7), (4, 3), (8, 1)]
    assert _serving(sixteen, max_procs=2)._served_splits(cpu) == [(0, 15), (1, 14), (2, 7)]
    assert _serving(sixteen, split=False)._served_splits(cpu) == [(0, 15)]
    shared = plan({0, 1}, pinnable=True)  # not pinned: the server has both
    assert _serving(shared)._served_splits(cpu) == [(0, 2), (1, 1)]


def _run_as_served(monkeypatch: pytest.MonkeyPatch, cores: CorePlan) -> ServingPayload:
    """A run on a fake clock down the kind's own as-served path, to a fake server that ran
    where the plan it was given says (its client's and server's cores, as read back)."""
    import contextlib
    from collections.abc import Iterator
    from typing import Any

    from torchmark.kinds.serving import generator
    from torchmark.kinds.serving.fleet import Local
    from torchmark.results.serving import read
    from torchmark.testing import FakeClock, FakeExecutor

    monkeypatch.setattr(generator, "PER_RATE_S", 0.01)
    monkeypatch.setattr(generator, "RATES", (1_000,))
    clock = FakeClock(0.0)

    @contextlib.contextmanager
    def as_served(*args: Any, cores: CorePlan, **kw: Any) -> Iterator[Local]:
        fleet = Local(FakeExecutor(clock, 0.01), clock)
        fleet.client_cores = cores.client or cores.allowed  # type: ignore[attr-defined]
        fleet.server_cores = cores.server or cores.allowed  # type: ignore[attr-defined]
        yield fleet

    real = kind.Serving._fleet

    def fleet(self: kind.Serving, device: Any, planned: Any, max_batch: int) -> Any:
        if planned.served:  # the kind's own path, to the server's (faked) start
            return real(self, device, planned, max_batch)
        return contextlib.nullcontext(Local(FakeExecutor(clock, 0.01), clock))

    monkeypatch.setattr(kind, "as_served", as_served)
    monkeypatch.setattr(kind.Serving, "_fleet", fleet)
    run = _serving(cores, split=False)
    run.clock = clock
    p = read(run.run())
    assert p is not None
    return p


def test_a_two_core_run_says_the_load_generator_shares_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchmark.report.serving import fleet_heading

    p = _run_as_served(monkeypatch, plan({0, 1}, pinnable=True))
    assert [f.served for f in p.fleets] == ["", "oip"]
    inproc, served = p.fleets
    assert inproc.client_cores is None and inproc.cores == ""  # the capacity: as it was
    assert (served.client_cores, served.server_cores) == ([0, 1], [0, 1])
    assert served.cores == "client and server share cores 0-1"
    said = lines(p)
    assert sum("the load generator shares the 2 cores with the server" in x for x in said) == 1
    assert ", client and server share cores 0-1: " in fleet_heading(served)


def test_a_sixteen_core_run_stores_and_shows_where_each_ran(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchmark.report.serving import cores_lines, fleet_heading, front_end_sentence

    p = _run_as_served(monkeypatch, plan(range(16), pinnable=True))
    served = p.fleets[1]
    assert (served.client_cores, served.server_cores) == ([15], list(range(15)))
    assert served.model_workers == 0 and served.model_threads == 15
    assert not any("shares" in x for x in lines(p))
    text = "client on core 15, server on cores 0-14"
    assert served.cores == text and f", {text}: " in fleet_heading(served)
    assert cores_lines(p) == [f"as served: {text}"]
    # the gap to the in-process capacity holds the load generator's core: said beside it
    p.answers[0].fleet = 1  # as served, the answer found on that fleet
    said = front_end_sentence(p, "cpu", 0.5)
    assert said.endswith(
        "; as served the server had 15 of the 16 cores, the load generator the rest"
    )
    p.fleets[1].client_cores = p.fleets[1].server_cores  # not pinned: nothing more to say
    assert "cores" not in front_end_sentence(p, "cpu", 0.5)


def test_the_cores_are_said_compactly_and_old_runs_read_as_before() -> None:
    from torchmark.results.serving import core_list

    assert core_list([15]) == "core 15" and core_list([0, 1]) == "cores 0-1"
    assert core_list([9, 2, 7, 3]) == "cores 2-3,7,9"
    wide = FleetDoc(device="cpu", label="cpu", client_cores=[127], server_cores=list(range(127)))
    assert wide.cores == "client on core 127, server on cores 0-126"
    holes = wide.model_copy(update={"client_cores": [9], "server_cores": [2, 3, 7]})
    assert holes.cores == "client on core 9, server on cores 2-3,7"
    old = FleetDoc.model_validate({"device": "cpu", "label": "cpu", "served": "oip"})
    assert old.client_cores is None and old.cores == ""


def test_the_markdown_report_says_where_the_client_and_server_ran() -> None:
    from torchmark.report import markdown
    from torchmark.results.serving import read, write

    run = _served_run()
    assert "client on" not in markdown.render([run])  # type: ignore[list-item]
    p = read(run)  # type: ignore[arg-type]
    assert p is not None
    p.fleets[1].client_cores, p.fleets[1].server_cores = [3], [0, 1, 2]
    write(run, p)  # type: ignore[arg-type]
    assert "as served: client on core 3, server on cores 0-2" in markdown.render([run])  # type: ignore[list-item]
