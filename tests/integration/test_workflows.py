"""Workflows end to end: real workers, readiness decided in the parents' acks."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections import Counter

import psycopg
import pytest
from typer.testing import CliRunner

from pgqueue import (
    DAG,
    InvalidJobError,
    JobCancelledError,
    JobDeadError,
    JobNotFoundError,
    chain,
    chord,
    group,
)
from pgqueue.cli import app as cli_app
from pgqueue.db.views import queue_stats
from tests.helpers import ledger, scalar, spawn_worker, thread_worker, wait_for
from tests.integration import workflow_app
from tests.integration.workflow_app import add, alert, async_add, attempt, collect, fail, step

APP = workflow_app.pgq
WORKFLOW_APP = "tests.integration.workflow_app:pgq"


def states(dsn: str, workflow_id: int) -> dict[int, str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT job_id, state FROM pgqueue.workflow_jobs WHERE workflow_id = %s",
            (workflow_id,),
        ).fetchall()
    return dict(rows)


def events(dsn: str) -> list[tuple[str, str]]:
    """(event, note) in ledger order."""
    return [(row[4], row[5]) for row in ledger(dsn)]


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise


def test_chain_passes_each_result_to_the_next_step(app_dsn, pgq):
    run = pgq.enqueue_workflow(chain(add.s(1, 2), async_add.s(y=10), add.s(y=100)))
    assert states(app_dsn, run.id) == dict.fromkeys(run.job_ids[:1], "ready") | dict.fromkeys(
        run.job_ids[1:], "waiting"
    )
    with thread_worker(APP, app_dsn):
        assert run.result(timeout=60) == 113
    with psycopg.connect(app_dsn) as conn:
        args: dict[int, object] = dict(
            conn.execute(
                "SELECT id, args FROM pgqueue.job_history WHERE id = ANY(%s)", (run.job_ids,)
            ).fetchall()
        )
    assert args[run.job_ids[1]] == {"x": 3, "y": 10}  # the previous result went into x
    assert args[run.job_ids[2]] == {"x": 13, "y": 100}
    assert pgq.workflow(run.id)["state"] == "succeeded"


@pytest.fixture
def wf_app(app_dsn, monkeypatch):
    """The tasks' own PgQueue, pointed at this test's database (for workflow.enqueue())."""
    monkeypatch.setattr(workflow_app.pgq._pools, "_dsn", app_dsn)
    yield workflow_app.pgq
    workflow_app.pgq.close()


def test_group_result_is_the_list_in_order_and_async_enqueue_works(app_dsn, wf_app):
    async def main():
        try:
            run = await group(add.s(i, i) for i in range(6)).enqueue_async()
            return run, await run.result_async(timeout=60)
        finally:
            await wf_app.aclose()

    with thread_worker(APP, app_dsn, concurrency=4):
        run, result = asyncio.run(main())
    assert result == [0, 2, 4, 6, 8, 10]
    assert len(run.job_ids) == 6


def test_chord_of_100_calls_its_callback_once_with_100_results(app_dsn, pgq, tmp_path):
    run = pgq.enqueue_workflow(chord([add.s(i) for i in range(100)], collect.s()))
    # two real worker processes ack the header concurrently
    workers = [
        spawn_worker(app_dsn, "--concurrency", "8", log=tmp_path / f"w{i}.log", app=WORKFLOW_APP)
        for i in range(2)
    ]
    try:
        assert run.result(timeout=120) == sum(range(100))
    finally:
        for worker in workers:
            stop(worker)
    calls = [note for event, note in events(app_dsn) if event == "end" and note.startswith("[")]
    assert len(calls) == 1
    assert json.loads(calls[0]) == list(range(100))  # every result, in group order
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0


def test_diamond_dag_runs_in_order_with_the_middle_in_parallel(app_dsn, pgq, wf_app, tmp_path):
    dag = DAG(name="diamond")
    a = dag.add(step.s("A", 0.2), name="A")
    b = dag.add(step.s("B", 1.5), depends_on=[a])
    c = dag.add(step.s("C", 1.5), depends_on=[a])
    dag.add(step.s("D"), depends_on=[b, c], name="D")
    run = dag.enqueue()  # the tasks' own app: resolves PGQUEUE_DSN, the test database
    assert states(app_dsn, run.id)[run["D"]] == "waiting"
    worker = spawn_worker(app_dsn, "--concurrency", "4", log=tmp_path / "w.log", app=WORKFLOW_APP)
    try:
        assert pgq.result(run["D"], timeout=120) == "D"
    finally:
        stop(worker)
    seen = events(app_dsn)
    at = {item: index for index, item in enumerate(seen)}
    assert at["end", "A"] < at["start", "B"] and at["end", "A"] < at["start", "C"]
    # B and C ran at the same time: each started before the other ended
    assert at["start", "B"] < at["end", "C"] and at["start", "C"] < at["end", "B"]
    assert at["start", "D"] > at["end", "B"] and at["start", "D"] > at["end", "C"]
    assert Counter(event for event, _ in seen) == {"start": 4, "end": 4}


def test_failure_in_the_middle_cancels_the_rest_and_runs_on_failure_once(app_dsn, pgq):
    run = pgq.enqueue_workflow(
        chain(
            step.s("A"),
            group(fail.s("B1"), fail.s("B2"), step.s("B3")),
            step.s("C"),
            step.s("D"),
            on_failure=alert.s(channel="pager"),
            name="doomed",
        )
    )
    a, b1, b2, b3, c, d = run.job_ids
    with thread_worker(APP, app_dsn, concurrency=4):
        wait_for(lambda: pgq.workflow(run.id)["state"] == "failed", timeout=60)
        wait_for(lambda: len(ledger(app_dsn, "end")) >= 3, message="alert ran", timeout=60)
    final = states(app_dsn, run.id)
    assert final[a] == "succeeded" and final[b3] == "succeeded"
    assert final[b1] == final[b2] == "dead"
    assert final[c] == final[d] == "cancelled"
    assert "waiting" not in final.values()
    with pytest.raises(JobCancelledError, match=r"upstream job \d+ ended dead"):
        pgq.result(d, timeout=5)
    with pytest.raises(JobCancelledError):
        run.result(timeout=5)  # the chain's result is its last step's
    with pytest.raises(JobDeadError, match="B1 cannot work"):
        pgq.result(b1, timeout=5)
    # the on_failure step ran exactly once, with the first failure
    alerts = [json.loads(note) for event, note in events(app_dsn) if note and note.startswith("{")]
    assert len(alerts) == 1
    assert alerts[0]["workflow_id"] == run.id and alerts[0]["job_id"] in (b1, b2)
    assert alerts[0]["state"] == "dead" and "cannot work" in alerts[0]["error"]
    detail = pgq.workflow(run.id)
    assert detail["on_failure"]["fired"] and detail["name"] == "doomed"
    assert pgq.result(detail["on_failure"]["job_id"], timeout=5).startswith("pager:")
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0


def test_cancelling_a_waiting_member_cancels_its_descendants(app_dsn, pgq):
    run = pgq.enqueue_workflow(chain(step.s("A"), step.s("B"), group(step.s("C"), step.s("D"))))
    a, b, c, d = run.job_ids
    assert pgq.cancel(b) == "cancelled"
    assert states(app_dsn, run.id) == {a: "ready", b: "cancelled", c: "cancelled", d: "cancelled"}
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    assert [note for event, note in events(app_dsn) if event == "end"] == ["A"]


def test_cancelling_a_running_member_cancels_what_follows(app_dsn, pgq):
    run = pgq.enqueue_workflow(chain(step.s("A", 1.0), step.s("B")))
    a, b = run.job_ids
    with thread_worker(APP, app_dsn):
        wait_for(lambda: ("start", "A") in events(app_dsn), message="A running")
        assert pgq.cancel(a) == "cancelling"
        # the handler finishes (it does not cooperate); its ack records it cancelled and the
        # same statement cancels B
        wait_for(lambda: states(app_dsn, run.id) == {a: "cancelled", b: "cancelled"})
    assert ("start", "B") not in events(app_dsn)


def test_enqueue_many_with_depends_on(app_dsn, pgq):
    with psycopg.connect(app_dsn) as conn:
        [first] = pgq.enqueue_many([step.s("first")], conn=conn)
        ids = pgq.enqueue_many(
            [step.s("second", depends_on=[first]), step.s("alone"), add.s(1, result_ttl=60)],
            conn=conn,
        )
        conn.commit()
    second, _, kept = ids
    with thread_worker(APP, app_dsn):
        assert pgq.result(second, timeout=60) == "second"
        assert pgq.result(kept, timeout=60) == 1
        wait_for(lambda: ("end", "alone") in events(app_dsn), message="the plain job ran")
    order = [note for event, note in events(app_dsn) if event == "end"]
    assert order.index("first") < order.index("second")


def test_workflow_enqueue_is_atomic_in_the_callers_transaction(app_dsn, pgq):
    with psycopg.connect(app_dsn) as conn:
        pgq.enqueue_workflow(chain(add.s(1), add.s()), conn=conn)
        conn.rollback()
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.workflows") == 0
    with psycopg.connect(app_dsn) as conn:
        run = pgq.enqueue_workflow(chain(add.s(1), add.s()), conn=conn)
        # not visible to anyone else (or any worker) before the commit
        assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
        conn.commit()
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 2
    with thread_worker(APP, app_dsn):
        assert run.result(timeout=60) == 1


def test_cycles_and_bad_parents_are_rejected_before_anything_is_written(app_dsn, pgq):
    dag = DAG()
    dag.add(step.s("a"), name="a", depends_on=["b"])
    dag.add(step.s("b"), name="b", depends_on=["a"])
    with pytest.raises(InvalidJobError, match="cycle"):
        pgq.enqueue_workflow(dag)
    with pytest.raises(JobNotFoundError, match="depends_on: job 999999 not found"):
        pgq.enqueue(step, {"label": "x"}, depends_on=[999999])
    dead = pgq.enqueue(fail, {"label": "p"})
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    with pytest.raises(InvalidJobError, match=f"job {dead} already ended dead"):
        pgq.enqueue(step, {"label": "x"}, depends_on=[dead])
    with pytest.raises(InvalidJobError, match="idempotency_key cannot be used"):
        pgq.enqueue(step, {"label": "x"}, depends_on=[dead], idempotency_key="k")
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.workflows") == 0


def test_depends_on_job_ids_in_one_transaction_and_on_finished_jobs(app_dsn, pgq):
    with psycopg.connect(app_dsn) as conn:
        a = step.options(conn=conn).enqueue("A", 0.3)
        b = step.options(conn=conn, depends_on=[a]).enqueue("B")
        c = step.options(conn=conn, depends_on=[a, b]).enqueue("C")
        conn.commit()
    workflow_id = scalar(
        app_dsn, "SELECT workflow_id FROM pgqueue.workflow_nodes WHERE job_id = %s", (c,)
    )
    assert states(app_dsn, workflow_id) == {a: "ready", b: "waiting", c: "waiting"}
    with thread_worker(APP, app_dsn, concurrency=4):
        assert pgq.result(c, timeout=60) == "C"
        assert pgq.result(a, timeout=5) == "A"  # adopted parents keep their results
        # a job depending on one that already succeeded is ready at once
        late = pgq.enqueue(step, {"label": "late"}, depends_on=[b])
        assert pgq.result(late, timeout=60) == "late"
    assert [note for event, note in events(app_dsn) if event == "end"] == ["A", "B", "C", "late"]


def test_depends_on_a_running_job(app_dsn, pgq):
    parent = pgq.enqueue(step, {"label": "P", "seconds": 1.0}, result_ttl=60)
    with thread_worker(APP, app_dsn, concurrency=2):
        wait_for(lambda: ledger(app_dsn, "start"), message="parent running")
        child = pgq.enqueue(step, {"label": "child"}, depends_on=[parent])
        assert pgq.result(child, timeout=60) == "child"
    assert [note for event, note in events(app_dsn) if event == "end"] == ["P", "child"]


def test_waiting_jobs_are_never_claimed_or_reaped_and_are_visible(app_dsn, pgq):
    dag = DAG()
    root = dag.add(step.s("root"))
    dag.add(step.s("child"), depends_on=[root])
    run = pgq.enqueue_workflow(dag)
    root_id, child_id = run.job_ids
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        # the root stays out of reach (scheduled far ahead), so the child keeps waiting
        conn.execute(
            "UPDATE pgqueue.jobs SET state = 'scheduled', run_at = now() + interval '1 hour'"
            " WHERE id = %s",
            (root_id,),
        )
        # even an expired-looking lease does not make the reaper touch a waiting job
        conn.execute(
            "UPDATE pgqueue.jobs SET lease_expires_at = now() - interval '1 hour' WHERE id = %s",
            (child_id,),
        )
    with thread_worker(APP, app_dsn, burst=True) as w:
        w.join()
    assert pgq.admin.reap() == 0
    assert states(app_dsn, run.id) == {root_id: "scheduled", child_id: "waiting"}
    assert ledger(app_dsn) == []
    [stats] = [row for row in queue_stats(pgq) if row["queue"] == "default"]
    assert stats["waiting"] == 1 and stats["ready"] == 0
    [overview] = pgq.workflows()
    assert overview["waiting"] == 1 and overview["state"] == "running"


def test_sigkill_mid_workflow_does_not_stall_it(app_dsn, pgq, tmp_path):
    run = pgq.enqueue_workflow(chain(attempt.s("A", 0.0), attempt.s("B", 2.0), attempt.s("C", 0.0)))
    victim = spawn_worker(
        app_dsn, "--lease", "2s", "--no-reaper", log=tmp_path / "victim.log", app=WORKFLOW_APP
    )
    try:
        wait_for(lambda: ("start", "B") in events(app_dsn), timeout=60, message="B started")
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(60) == -signal.SIGKILL
    finally:
        victim.kill()
    assert states(app_dsn, run.id)[run.job_ids[2]] == "waiting"
    rescuer = spawn_worker(app_dsn, "--lease", "2s", log=tmp_path / "rescuer.log", app=WORKFLOW_APP)
    try:
        assert run.result(timeout=120) == "C"
    finally:
        stop(rescuer)
    ends = [note for event, note in events(app_dsn) if event == "end"]
    assert ends == ["A:1", "B:2", "C:1"]  # B ran again after the reaper recovered it


def test_cli_workflow_show_and_list(app_dsn, pgq):
    run = pgq.enqueue_workflow(chord([add.s(1), add.s(2)], collect.s(), name="cli"))
    runner = CliRunner()
    shown = runner.invoke(cli_app, ["workflow", "show", str(run.id), "--dsn", app_dsn])
    assert shown.exit_code == 0, shown.output
    assert "workflow" in shown.output and "wf.collect" in shown.output
    assert "waiting" in shown.output and "see above" in shown.output
    as_json = runner.invoke(cli_app, ["workflow", "show", str(run.id), "--json", "--dsn", app_dsn])
    document = json.loads(as_json.output)
    assert [job["state"] for job in document["jobs"]] == ["ready", "ready", "waiting"]
    assert document["jobs"][2]["parents"] == run.job_ids[:2]
    listed = runner.invoke(cli_app, ["workflow", "list", "--json", "--dsn", app_dsn])
    assert [(w["id"], w["name"], w["state"]) for w in json.loads(listed.output)] == [
        (run.id, "cli", "running")
    ]
    missing = runner.invoke(cli_app, ["workflow", "show", "424242", "--dsn", app_dsn])
    assert missing.exit_code == 1 and "workflow 424242 not found" in missing.output


def test_workflow_jobs_keep_their_concurrency_keys(app_dsn, pgq):
    run = pgq.enqueue_workflow(chain(add.s(1, 2), add.s(y=1, concurrency_key="customer-7")))
    first, second = run.job_ids
    with psycopg.connect(app_dsn) as conn:
        rows = conn.execute(
            "SELECT id, concurrency_key FROM pgqueue.jobs WHERE id = ANY(%s)", ([first, second],)
        ).fetchall()
    keys: dict[int, str | None] = dict(rows)
    assert keys == {first: None, second: "customer-7"}
    # The task is marked keyed, so its claims check the key limit.
    assert scalar(app_dsn, "SELECT keyed FROM pgqueue.task_limits WHERE task = %s", (add.name,))


@pytest.mark.parametrize("timeout", [-1, float("nan")])
def test_workflow_result_refuses_a_bad_timeout_as_pgq_result_does(pgq, timeout):
    """It turned a negative or NaN timeout into 0: a ResultTimeoutError for a workflow still
    running (the result of one that finished), where pgq.result() refuses it."""
    run = pgq.enqueue_workflow(chain(add.s(1, 2), add.s(y=10)))
    with pytest.raises(ValueError, match="timeout must"):
        run.result(timeout=timeout)

    async def main() -> None:
        try:
            with pytest.raises(ValueError, match="timeout must"):
                await asyncio.wait_for(run.result_async(timeout=timeout), 10)
        finally:
            await pgq.aclose()

    asyncio.run(main())
