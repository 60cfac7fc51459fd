"""`pgq work --pool process`: sync handlers in child processes, real signals, real PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from pgqueue import PgQueue
from tests.helpers import ledger, scalar, spawn_worker, thread_worker, wait_for
from tests.integration import process_app

pytestmark = pytest.mark.slow

APP = "tests.integration.process_app:pgq"


_logs: dict[int, Path] = {}


def start(dsn: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    worker = spawn_worker(dsn, "--pool", "process", *args, app=APP, log=log)
    _logs[worker.pid] = log
    return worker


def stop(worker: subprocess.Popen[bytes], timeout: float = 60) -> int:
    """SIGTERM, wait for the exit status, and check the log shows no error of the worker's."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
    try:
        code = worker.wait(timeout)
    except subprocess.TimeoutExpired:
        worker.kill()
        raise
    text = _logs[worker.pid].read_text()
    assert "Traceback" not in text and " ERROR " not in text, text[-3000:]
    return code


def alive(pid: int) -> bool:
    """A live process (a zombie waiting to be reaped counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def rows(dsn: str, event: str) -> list[tuple[int, int, int, str | None]]:
    """(job id, attempt, pid, note) of the ledger rows with ``event``."""
    return [(r[0], r[1], r[2], r[5]) for r in ledger(dsn, event)]


def test_handlers_run_in_children_with_their_context(app_dsn, pgq, tmp_path):
    ids = [pgq.enqueue(process_app.noop, {"n": i}) for i in range(6)]
    ctx_job = pgq.enqueue(process_app.context, {"label": "hi"}, queue="default")
    passed = pgq.enqueue(process_app.pass_context, {"label": "p"})
    on_loop = pgq.enqueue(process_app.async_noop, {})
    kept = pgq.enqueue(process_app.result, {"a": 2, "b": 3})
    logged = pgq.enqueue(process_app.log_line, {})
    worker = start(app_dsn, tmp_path / "w.log", "--concurrency", "3")
    try:
        value = pgq.result(kept, timeout=60)
        wait_for(lambda: len(rows(app_dsn, "end")) == 10, timeout=60, message="every job")
    finally:
        assert stop(worker) == 0
    ends = {r[0]: r for r in rows(app_dsn, "end")}
    child_pids = {ends[i][2] for i in [*ids, ctx_job, passed, logged]}
    assert worker.pid not in child_pids and len(child_pids) <= 3  # at most --concurrency
    assert value["sum"] == 5 and value["pid"] != worker.pid
    assert ends[on_loop][2] == worker.pid  # async def stays on the worker's loop
    assert ends[ctx_job][3] == f"hi:{ctx_job}:proc.context:default:1/4"  # current_job() there
    assert ends[passed][3] == "p:proc.pass_context:True"
    text = (tmp_path / "w.log").read_text()
    # a child's log record comes out through the worker's logging, with the job's fields
    [line] = [ln for ln in text.splitlines() if "hello from pid=" in ln]
    assert f"job_id={logged}" in line and "task=proc.log" in line
    assert "child process started pid=" in text


def test_timeout_kills_the_child_and_the_late_write_never_happens(app_dsn, pgq, tmp_path):
    job = pgq.enqueue(process_app.timeout, {})  # timeout 1s, sleeps 3s then writes; 2 attempts
    pgq.enqueue(process_app.noop, {"n": 1})
    worker = start(app_dsn, tmp_path / "w.log", "--concurrency", "2")
    try:
        wait_for(pgq.admin.dead_letters, timeout=60, message="timed-out job dead-lettered")
        [dead] = pgq.admin.dead_letters()
        assert dead["id"] == job and dead["attempts"] == 2
        assert [e["error"] for e in dead["errors"]] == ["pgqueue.errors.JobTimeout"] * 2
        assert "timed out after 1s (child process killed)" in dead["last_error"]
        starts = rows(app_dsn, "start")
        assert [r[1] for r in starts] == [1, 2]  # retried per policy, in a new child
        assert starts[0][2] != starts[1][2]
        assert not any(alive(r[2]) for r in starts), "a timed-out child is still alive"
        time.sleep(4.0)  # longer than the handler would have slept
        assert rows(app_dsn, "late") == [], "the handler wrote after its timeout"
        assert worker.poll() is None
    finally:
        assert stop(worker) == 0


@pytest.mark.parametrize(
    ("how", "error"),
    [
        ("segv", "child process killed by SIGSEGV"),
        ("exit3", "child process exited with status 3"),
        ("sigkill", "child process killed by SIGKILL"),
    ],
)
def test_a_child_that_dies_fails_only_its_job(app_dsn, pgq, tmp_path, how, error):
    survivor = pgq.enqueue(process_app.sleep, {"seconds": 2.0, "cooperative": False})
    worker = start(app_dsn, tmp_path / "w.log", "--concurrency", "3")
    try:
        wait_for(lambda: rows(app_dsn, "start"), timeout=60, message="the long job started")
        crashed = pgq.enqueue(process_app.crash, {"how": how})  # max_attempts=1
        wait_for(pgq.admin.dead_letters, timeout=60, message="the crashed job dead-lettered")
        [dead] = pgq.admin.dead_letters()
        assert dead["id"] == crashed and dead["attempts"] == 1
        assert dead["errors"][-1]["error"] == "pgqueue.worker.process_pool.ChildProcessDied"
        assert dead["last_error"].startswith(error)
        after = [pgq.enqueue(process_app.noop, {"n": i}) for i in range(4)]
        wait_for(
            lambda: {r[0] for r in rows(app_dsn, "end")} >= {survivor, *after},
            timeout=60,
            message="the other jobs",
        )
        assert worker.poll() is None, "the worker died with its child"
    finally:
        assert stop(worker) == 0
    [(_, _, crashed_pid, _)] = [r for r in rows(app_dsn, "start") if r[0] == crashed]
    [(_, _, survivor_pid, _)] = [r for r in rows(app_dsn, "end") if r[0] == survivor]
    assert crashed_pid not in {worker.pid, survivor_pid}
    assert crashed_pid not in {r[2] for r in rows(app_dsn, "end")}  # replaced, never reused
    assert (
        f"child process died while running a job pid={crashed_pid}"
        in (tmp_path / "w.log").read_text()
    )


def test_a_crash_counts_an_attempt_and_the_retry_runs_in_a_new_child(app_dsn, pgq, tmp_path):
    job = pgq.enqueue(process_app.crash_twice, {})
    worker = start(app_dsn, tmp_path / "w.log", "--concurrency", "1")
    try:
        wait_for(lambda: rows(app_dsn, "end"), timeout=60, message="the retry to succeed")
    finally:
        assert stop(worker) == 0
    starts = rows(app_dsn, "start")
    assert [(r[0], r[1]) for r in starts] == [(job, 1), (job, 2)]
    assert starts[0][2] != starts[1][2]
    assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0


def test_max_jobs_per_child_recycles_children(app_dsn, pgq, tmp_path):
    ids = [pgq.enqueue(process_app.noop, {"n": i}) for i in range(6)]
    worker = start(app_dsn, tmp_path / "w.log", "--concurrency", "1", "--max-jobs-per-child", "2")
    try:
        wait_for(lambda: len(rows(app_dsn, "end")) == 6, timeout=90, message="six jobs")
    finally:
        assert stop(worker) == 0
    by_job = {r[0]: r[2] for r in rows(app_dsn, "end")}
    pids = [by_job[i] for i in ids]
    assert sorted(Counter(pids).values()) == [2, 2, 2], pids
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4] == pids[5]
    assert "(max-jobs-per-child 2)" in (tmp_path / "w.log").read_text()


def test_max_memory_per_child_recycles_a_leaking_child(app_dsn, pgq, tmp_path):
    small = [pgq.enqueue(process_app.noop, {"n": i}) for i in range(2)]
    leaks = [pgq.enqueue(process_app.leak, {"mb": 160}) for _ in range(2)]
    last = pgq.enqueue(process_app.noop, {"n": 9})
    worker = start(
        app_dsn, tmp_path / "w.log", "--concurrency", "1", "--max-memory-per-child", "150"
    )
    try:
        wait_for(lambda: len(rows(app_dsn, "end")) == 5, timeout=90, message="five jobs")
    finally:
        assert stop(worker) == 0
    pid = {r[0]: r[2] for r in rows(app_dsn, "end")}
    # small jobs share a child; each leak pushes its child over the limit and it is replaced
    assert pid[small[0]] == pid[small[1]] == pid[leaks[0]]
    assert pid[leaks[1]] != pid[leaks[0]]
    assert pid[last] != pid[leaks[1]]
    assert "(max-memory-per-child 150 MB)" in (tmp_path / "w.log").read_text()


@pytest.mark.parametrize("cooperative", [True, False])
def test_cancel_stops_a_running_job_in_a_child(app_dsn, pgq, tmp_path, cooperative):
    job = pgq.enqueue(process_app.sleep, {"seconds": 60, "cooperative": cooperative})
    worker = start(app_dsn, tmp_path / "w.log")
    try:
        wait_for(lambda: rows(app_dsn, "start"), timeout=60, message="job started")
        assert pgq.cancel(job) == "cancelling"
        wait_for(
            lambda: (
                scalar(app_dsn, "SELECT state FROM pgqueue.job_history WHERE id = %s", (job,))
                == "cancelled"
            ),
            timeout=30,
            message="job recorded as cancelled",
        )
        [(_, _, child, _)] = rows(app_dsn, "start")
        if cooperative:  # it saw ctx.cancelled (a message from the worker) and stopped
            assert rows(app_dsn, "cancelled") == [(job, 1, child, "cancelled")]
            assert alive(child), "a child that stopped by itself is kept"
        else:  # it did not: killed after the grace
            wait_for(lambda: not alive(child), timeout=10, message="the child killed")
        assert rows(app_dsn, "end") == []
        assert scalar(app_dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
    finally:
        assert stop(worker) == 0


def test_shutdown_kills_children_after_the_grace_and_leaves_no_orphans(app_dsn, pgq, tmp_path):
    short = pgq.enqueue(process_app.sleep, {"seconds": 0.5, "cooperative": False})
    stuck = [pgq.enqueue(process_app.sleep, {"seconds": 60, "cooperative": False})]
    stuck.append(pgq.enqueue(process_app.sleep, {"seconds": 60, "cooperative": False}))
    worker = start(app_dsn, tmp_path / "w.log", "--concurrency", "4", "--shutdown-grace", "2s")
    wait_for(lambda: len(rows(app_dsn, "start")) == 3, timeout=60, message="three started")
    wait_for(lambda: rows(app_dsn, "end"), timeout=30, message="the short job")
    pids = {r[2] for r in rows(app_dsn, "start")}
    started = time.monotonic()
    assert stop(worker, 30) == 0
    assert time.monotonic() - started < 20
    assert not [p for p in pids if alive(p)], "children outlived their worker"
    assert [r[0] for r in rows(app_dsn, "end")] == [short]
    with psycopg.connect(app_dsn) as conn:
        left: dict[int, str] = dict(conn.execute("SELECT id, state FROM pgqueue.jobs").fetchall())
    assert left == dict.fromkeys(stuck, "ready")  # handed back, attempt not burned
    assert "released unfinished jobs count=2" in (tmp_path / "w.log").read_text()


def test_children_die_with_a_worker_killed_by_sigkill(app_dsn, pgq, tmp_path):
    pgq.enqueue(process_app.sleep, {"seconds": 60, "cooperative": False})
    worker = start(app_dsn, tmp_path / "w.log", "--lease", "2s")
    try:
        wait_for(lambda: rows(app_dsn, "start"), timeout=60, message="job started")
        [(_, _, child, _)] = rows(app_dsn, "start")
        worker.send_signal(signal.SIGKILL)
        assert worker.wait(30) == -signal.SIGKILL
        wait_for(lambda: not alive(child), timeout=10, message="the orphaned child gone")
    finally:
        worker.kill()
    assert rows(app_dsn, "end") == []


def test_lease_loss_stops_the_child(app_dsn, pgq):
    """In-process worker, app spec found from the loaded modules (programmatic use)."""
    job = pgq.enqueue(process_app.sleep, {"seconds": 60, "cooperative": False})
    with thread_worker(process_app.pgq, app_dsn, pool="process", lease=1.5, reaper_interval=None):
        wait_for(lambda: rows(app_dsn, "start"), timeout=60, message="job started")
        [(_, _, child, _)] = rows(app_dsn, "start")
        assert child != os.getpid()
        with psycopg.connect(app_dsn, autocommit=True) as conn:  # as if re-claimed elsewhere
            conn.execute(
                "UPDATE pgqueue.jobs SET lease_token = lease_token + 1000 WHERE id = %s", (job,)
            )
        wait_for(lambda: not alive(child), timeout=20, message="the child stopped")
    assert rows(app_dsn, "end") == []
    # not ours any more: nothing was written about it
    assert scalar(app_dsn, "SELECT state FROM pgqueue.jobs WHERE id = %s", (job,)) == "running"


def test_retry_fail_and_retry_policies_cross_the_process_boundary(app_dsn, pgq):
    retried = pgq.enqueue(process_app.retry_once, {})  # max_attempts=1: Retry must not burn it
    failed = pgq.enqueue(process_app.fails_for_good, {})
    final = pgq.enqueue(process_app.no_retry, {})
    by_error = pgq.enqueue(process_app.backoff_by_error, {})  # 0.1s only for a KeyError
    bad_args = pgq.enqueue("proc.context", {"unexpected": 1})  # its `label` is missing
    with thread_worker(process_app.pgq, app_dsn, pool="process", concurrency=2):
        wait_for(
            lambda: len(pgq.admin.dead_letters()) == 4, timeout=60, message="four dead letters"
        )
        wait_for(lambda: rows(app_dsn, "end"), timeout=30, message="the retried job")
    dead = {d["id"]: d for d in pgq.admin.dead_letters()}
    assert dead[failed]["attempts"] == 1 and "Fail raised" in dead[failed]["reason"]
    assert dead[failed]["errors"][-1]["error"] == "pgqueue.errors.Fail"
    assert dead[final]["attempts"] == 1
    assert dead[final]["errors"][-1]["error"] == "tests.integration.process_app.Permanent"
    assert "Traceback" in dead[final]["errors"][-1]["traceback"]
    assert dead[by_error]["attempts"] == 3  # the error-aware backoff ran (an hour otherwise)
    assert "missing a required argument: 'label'" in dead[bad_args]["last_error"]
    assert [r[1] for r in rows(app_dsn, "start") if r[0] == retried] == [1, 1]
    assert retried not in dead


def test_big_arguments_and_results_cross_whole(app_dsn, pgq):
    texts = ["".join(chr(0x41 + (i + n) % 26) for i in range(300_000)) + "é" for n in range(4)]
    ids = [pgq.enqueue(process_app.echo, {"data": text}) for text in texts]
    with thread_worker(process_app.pgq, app_dsn, pool="process", concurrency=2):
        results = [pgq.result(job, timeout=60) for job in ids]
    assert [r["data"] for r in results] == [text[::-1] for text in texts]
    assert [r["job"] for r in results] == ids


def test_a_spec_that_does_not_import_fails_the_attempt_clearly(app_dsn, pgq):
    job = pgq.enqueue(process_app.noop, {}, max_attempts=1)
    app = process_app.pgq
    with thread_worker(app, app_dsn, pool="process", app_spec="tests.integration.nowhere:pgq"):
        wait_for(pgq.admin.dead_letters, timeout=60, message="dead letter")
    [dead] = pgq.admin.dead_letters()
    assert dead["id"] == job
    assert dead["errors"][-1]["error"] == "pgqueue.worker.process_pool.ChildStartFailed"
    assert "No module named 'tests.integration.nowhere'" in dead["last_error"]


def test_pool_settings_are_checked(app_dsn):
    from pgqueue.errors import ConfigurationError
    from pgqueue.worker import Worker, WorkerSettings

    for settings in (
        WorkerSettings(pool="fork"),
        WorkerSettings(max_jobs_per_child=3),  # thread pool
        WorkerSettings(pool="process", max_jobs_per_child=0),
        WorkerSettings(pool="process", max_memory_per_child=0),
        WorkerSettings(pool="process", app_spec=":pgq"),
    ):
        with pytest.raises(ConfigurationError):
            Worker(process_app.pgq, settings, dsn=app_dsn)
    orphan = PgQueue(app_dsn)  # held by no module: the children could not import it

    @orphan.task(name="orphan.job")
    def job() -> None:
        pass

    with pytest.raises(ConfigurationError, match="app_spec"):
        WorkerSettings(pool="process").child_settings(orphan)
    orphan.close()


SCRIPT = """
import os
import sys

from pgqueue import PgQueue, current_job
from pgqueue.worker import Worker, WorkerSettings

pgq = PgQueue()


@pgq.task(name="script.where")
def where() -> None:
    import psycopg

    with psycopg.connect(os.environ["PGQUEUE_DSN"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO ledger (job_id, pid, event, note) VALUES (%s, %s, 'end', %s)",
            (current_job().id, os.getpid(), __name__),
        )


if __name__ == "__main__":
    pgq.enqueue(where)
    Worker(pgq, WorkerSettings(pool="process", burst=True)).run_sync()
    print("parent", os.getpid())
"""


def test_a_script_that_runs_its_own_worker_gets_children_that_import_it(app_dsn, tmp_path):
    """The app lives in __main__: spawn runs the script again in each child as __mp_main__."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, "PGQUEUE_DSN": app_dsn},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    parent = int(done.stdout.split()[-1])
    [(_, _, pid, note)] = rows(app_dsn, "end")
    assert pid != parent and note == "__mp_main__"
