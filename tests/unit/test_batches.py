"""Batch tasks without a database: how a task declares one job's arguments, how enqueue checks
and stores them, how the worker gathers jobs into batches, and what a call amounts to per job."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple, NotRequired, TypedDict

import pytest

from pgqueue import ConfigurationError, Fail, InvalidJobError, Item, PgQueue, Retry, current_job
from pgqueue.handler.batch import BatchTask
from pgqueue.handler.job_context import ClaimedJob, JobContext, reset_current, set_current
from pgqueue.worker.batches import Batches, prepare, settle
from pgqueue.worker.outcome import Outcome


class Row(TypedDict):
    n: int
    label: NotRequired[str]


@dataclass
class Point:
    x: int
    y: int = 0


class Pair(NamedTuple):
    a: int
    b: str


@dataclass
class Checked:
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("negative")


@pytest.fixture
def pgq() -> Iterator[PgQueue]:
    queue = PgQueue("postgresql://nobody@localhost/none")
    yield queue
    queue.close()


def job(job_id: int, args: Any, task: str = "rows", *, wants_result: bool = False) -> ClaimedJob:
    now = datetime.now(UTC)
    return ClaimedJob(job_id, "default", task, args, 1, 3, 7, 0, now, now, wants_result)


def test_a_typeddict_declares_the_arguments(pgq):
    @pgq.task(name="rows", batch_size=10)
    def rows(items: list[Item[Row]]) -> None: ...

    assert isinstance(rows, BatchTask)
    assert (rows.batch_size, rows.batch_wait) == (10, 1.0)
    assert rows.s(n=1).args == {"n": 1}
    assert rows.s({"n": 1, "label": "a"}).args == {"n": 1, "label": "a"}
    assert rows.options(queue="q").s(n=2, label="b").args == {"n": 2, "label": "b"}
    with pytest.raises(InvalidJobError, match="missing a required argument: 'n'"):
        rows.s(label="a").spec()
    with pytest.raises(InvalidJobError, match="unexpected keyword argument 'm'"):
        rows.s(n=1, m=2)
    assert rows.model.value({"n": 3}) == {"n": 3}
    # A key the model no longer has (a job of an older model): dropped, with a warning.
    assert rows.model.value({"n": 3, "z": 1}) == {"n": 3}


def test_a_dataclass_or_named_tuple_declares_the_arguments(pgq):
    @pgq.task(name="points", batch_size=10, batch_wait=0)
    def points(items: list[Item[Point]]) -> None: ...

    @pgq.task(name="pairs", batch_size=10)
    def pairs(items: list[Item[Pair]]) -> None: ...

    assert points.batch_wait == 0
    assert points.s(1).args == {"x": 1}
    assert points.s(Point(2, 3)).args == {"x": 2, "y": 3}
    assert points.s(x=4, y=5).args == {"x": 4, "y": 5}
    assert points.model.value({"x": 4}) == Point(4)
    assert pairs.s(Pair(1, "z")).args == {"a": 1, "b": "z"}
    assert pairs.model.value({"a": 1, "b": "z"}) == Pair(1, "z")

    @pgq.task(name="checked", batch_size=2)
    def checked(items: list[Item[Checked]]) -> None: ...

    with pytest.raises(InvalidJobError, match="do not make a Checked: ValueError: negative"):
        checked.model.value({"n": -1})


def test_a_dict_or_no_annotation_takes_any_keywords(pgq):
    @pgq.task(name="loose", batch_size=3)
    def loose(items: list[Item[dict[str, Any]]]) -> None: ...

    @pgq.task(name="bare", batch_size=3)
    def bare(items): ...

    for task in (loose, bare):
        assert task.s(a=1, b=[2]).args == {"a": 1, "b": [2]}
        assert task.s({"c": 3}).args == {"c": 3}
        with pytest.raises(InvalidJobError, match="as keywords or one mapping"):
            task.s(1, 2)
        assert task.model.value({"a": 1}) == {"a": 1}
        with pytest.raises(InvalidJobError, match="must be a JSON object"):
            task.model.value([1])


def test_what_a_batch_task_cannot_be(pgq):
    with pytest.raises(ConfigurationError, match="takes one parameter"):

        @pgq.task(name="two", batch_size=3)
        def two(items: list[Item[Row]], more: int) -> None: ...

    with pytest.raises(ConfigurationError, match=r"annotated list\[Item\[Args\]\]"):

        @pgq.task(name="ints", batch_size=3)
        def ints(items: list[int]) -> None: ...

    class Local(TypedDict):
        n: int

    with pytest.raises(ConfigurationError, match="declare the arguments' type at module level"):

        @pgq.task(name="local", batch_size=3)
        def local(items: list[Item[Local]]) -> None: ...

    with pytest.raises(ConfigurationError, match="no JobContext"):
        pgq.task(name="ctx", batch_size=3, pass_context=True)(lambda items: None)
    with pytest.raises(InvalidJobError, match="batch_size must be between 1 and 10000"):
        pgq.task(name="huge", batch_size=10_001)(lambda items: None)
    with pytest.raises(InvalidJobError, match="batch_wait must be between 0"):
        pgq.task(name="neg", batch_size=2, batch_wait=-1)(lambda items: None)
    with pytest.raises(ConfigurationError, match="needs batch_size"):
        pgq.task(name="nosize", batch_wait=1)(lambda items: None)


def test_calling_a_batch_task_runs_a_batch_of_one(pgq):
    @pgq.task(name="doubles", batch_size=3)
    def doubles(items: list[Item[Row]]) -> list[int]:
        for item in items:
            if item.args["n"] < 0:
                item.fail(Fail("negative"))
        return [item.args["n"] * 2 for item in items]

    assert doubles({"n": 2}) == [4]
    with pytest.raises(Fail, match="negative"):
        doubles({"n": -1})

    @pgq.task(name="adoubles", batch_size=3)
    async def adoubles(items: list[Item[Row]]) -> list[int]:
        return [item.args["n"] * 2 for item in items]

    assert asyncio.run(adoubles({"n": 3})) == [6]


def test_current_job_names_no_job_in_a_batch():
    token = set_current(None)
    try:
        with pytest.raises(LookupError, match="a batch handler runs several"):
            current_job()
    finally:
        reset_current(token)


def test_a_batch_handler_that_parks_fails_every_job_with_a_step_error(pgq):
    from pgqueue import StepError
    from pgqueue.handler.parking import JobParked

    @pgq.task(name="naps", batch_size=10)
    def naps(items: list[Item[Row]]) -> None: ...

    contexts = [JobContext(job(i, {"n": i}, task="naps"), "w") for i in (1, 2)]
    items, _, _ = prepare(naps, contexts, "w")
    # A sleep's signal (of some job's context the handler held) must not park the batch's jobs.
    settled = settle(naps, items, None, JobParked(1, 1, "sleep", 1, "sleep#1", delay=60), "w")
    assert all(isinstance(s, StepError) for s in settled)
    assert "a batch handler cannot park its jobs" in str(settled[0])


def test_each_item_settles_on_its_own(pgq):
    @pgq.task(name="rows", batch_size=10)
    def rows(items: list[Item[Row]]) -> None: ...

    jobs = [job(i, {"n": i}, wants_result=i == 3) for i in range(1, 5)]
    contexts = [JobContext(j, "w") for j in jobs]
    contexts.append(JobContext(job(9, {"bad": 1}), "w"))
    items, positions, failed = prepare(rows, contexts, "w")
    assert positions == [0, 1, 2, 3]
    assert failed[4].kind == "fail" and "missing a required" in (failed[4].summary or "")
    items[0].fail(ValueError("no"))
    items[1].fail(Retry(delay=5))
    # Returned: the marked ones keep their errors, the others succeed, with their results.
    settled = settle(rows, items, ["a", "b", "c", "d"], None, "w")
    assert [type(s).__name__ for s in settled] == ["ValueError", "Retry", "Outcome", "Outcome"]
    assert isinstance(settled[2], Outcome) and settled[2].result == '"c"'
    assert isinstance(settled[3], Outcome) and settled[3].result is None  # keeps none
    # Raised: everything not marked fails with it.
    error = RuntimeError("all")
    assert settle(rows, items, None, error, "w")[1:] == [items[1].error, error, error]
    # A result that is not one per item: the jobs keeping results fail for good.
    wrong = settle(rows, items, {"a": 1}, None, "w")[2]
    assert isinstance(wrong, Outcome) and wrong.kind == "fail"
    assert "return a list with one value per item (4)" in (wrong.summary or "")
    with pytest.raises(TypeError, match="takes an exception"):
        items[2].fail("no")  # type: ignore[arg-type]


def test_batches_gather_by_size_and_by_wait(pgq):
    @pgq.task(name="rows", batch_size=3, batch_wait=0.05)
    def rows(items: list[Item[Row]]) -> None: ...

    async def scenario() -> None:
        due: list[int] = []
        batches = Batches({"rows": rows}, lambda: due.append(len(batches.due)))
        assert batches.room(1) == 0  # no job of it came: no room asked for it
        for i in range(4):
            batches.add(job(i, {"n": i}))
        # Three make a full batch, due at once; the fourth waits for more.
        assert [len(g.jobs) for g in batches.due] == [3]
        assert batches.count == 4 and batches.room(1) == 0
        first = batches.take_due()
        assert [j.id for j in first.jobs] == [0, 1, 2]
        assert batches.room(1) == 2  # what the open batch lacks
        # While claims bring only batch jobs: a full batch for each other free slot too (each
        # free slot counts one job in the executor already).
        batches.only_batches = True
        assert batches.room(3) == 2 + 2 * (3 - 1)
        batches.only_batches = False
        await asyncio.sleep(0.1)
        assert due == [1]  # its wait is over: due with what it has
        batches.add(job(5, {"n": 5}))  # still joins it while not started
        assert [len(g.jobs) for g in batches.due] == [2]
        assert batches.remove(5, 7)[0].id == 5
        assert [j.id for j in batches.jobs()] == [3]
        assert [j.id for j in batches.release()] == [3]
        assert batches.count == 0 and not batches.due and not batches.open

    asyncio.run(scenario())


@dataclass
class Stamped:
    at: datetime
    label: str = ""


class StampedRow(TypedDict):
    at: datetime


def test_a_batch_models_annotations_type_its_fields(pgq):
    when = datetime(2026, 12, 6, 9, 30, tzinfo=UTC)

    @pgq.task(name="stamped", batch_size=10)
    def stamped(items: list[Item[Stamped]]) -> None: ...

    @pgq.task(name="stamped_rows", batch_size=10)
    def stamped_rows(items: list[Item[StampedRow]]) -> None: ...

    assert stamped.s(Stamped(when)).args == {"at": when.isoformat(), "label": ""}
    assert stamped.model.value({"at": when.isoformat()}) == Stamped(when)
    assert stamped_rows.s(at=when).args == {"at": when.isoformat()}
    assert stamped_rows.model.value({"at": when.isoformat()}) == {"at": when}
    with pytest.raises(InvalidJobError, match="argument 'at' of stamped: expected datetime"):
        stamped.s(at="soon")
