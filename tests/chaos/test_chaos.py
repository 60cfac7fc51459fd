"""The fault-injection scenarios at CI sizes (``pytest -m chaos``); full sizes and the figures
table: ``python -m benchmarks.chaos`` (see docs/reliability.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.chaos import durable, horizon, scenarios
from tests.chaos.harness import Env, Report

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(400)]


def show(report: Report) -> Report:
    print(f"\n{report}")  # the figures, for -s / the CI log on failure
    return report


def test_sigkill_workers_lose_nothing(dsn, tmp_path):
    report = show(scenarios.sigkill_workers(Env(dsn, tmp_path), "ci"))
    report.check()  # transactional effects exactly once, plain ones within the bound
    assert report.faults > 0, "no worker was killed: the scenario proved nothing"
    assert report.tx_jobs > 0


def test_a_thawed_worker_changes_nothing(dsn, tmp_path):
    report = show(scenarios.sigstop_past_lease(Env(dsn, tmp_path), "ci"))
    report.check()
    assert report.faults > 0 and report.interrupted > 0
    # The frozen worker woke up holding leases it had lost, and noticed (log evidence).
    assert report.notes["late writes rejected"] > 0


def test_reaper_and_late_ack_never_both_win(dsn, tmp_path):
    report = show(scenarios.reaper_vs_late_ack(Env(dsn, tmp_path), "ci"))
    assert report.notes["both_won"] == 0
    # Both orders really happened: each side won some rounds.
    assert report.notes["reaper_won"] > 0 and report.notes["ack_won"] > 0


def test_postgres_restarts_lose_nothing(own_server, tmp_path):
    env = Env(own_server.dsn, tmp_path, restart=lambda: own_server.restart("immediate"))
    report = show(scenarios.postgres_restarts(env, "ci"))
    report.check()
    assert report.faults >= 2


def test_network_cuts_lose_nothing(dsn, tmp_path):
    report = show(scenarios.network_cuts(Env(dsn, tmp_path), "ci"))
    report.check()  # transactional effects exactly once, plain ones within the bound
    assert report.faults == 2 and report.tx_jobs > 0


def test_ambiguous_commits_of_claim_and_ack(dsn, tmp_path):
    report = show(scenarios.ambiguous_commits(Env(dsn, tmp_path), "ci"))
    report.check()
    assert report.notes["ambiguous commits"] == 3
    # The committed ack was retried after the reset, found the job gone and changed nothing;
    # the worker says what happened (its first try committed), not that a lease was lost.
    assert report.notes["acks found already written"] >= 1
    assert report.notes["stale ack warnings"] == 0
    # The handler whose COMMIT reply was lost asked the server: committed, the job complete.
    assert report.notes["transactions found committed"] == 1
    assert report.duplicates == 0 and report.tx_jobs > 0


def test_skewed_worker_clocks_never_reclaim_early(dsn, tmp_path):
    report = show(scenarios.clock_skew(Env(dsn, tmp_path), "ci"))
    report.check()
    assert report.notes["premature reclaims"] == 0
    assert report.executions == report.enqueued + 1  # (+ the skewed producer's probe)
    assert report.notes["delay from a skewed producer (s)"] == 2.0
    today = datetime.now(UTC).date()
    assert {
        str(today + timedelta(days=1)),
        str(today - timedelta(days=1)),
    } <= set(report.notes["worker log dates"]), "the clock patch did not take effect"


def test_poison_pill_is_dead_lettered_and_the_rest_runs(dsn, tmp_path):
    report = show(scenarios.poison_pill(Env(dsn, tmp_path), "ci"))
    report.check(expect_dead=1)
    assert report.notes["poison dead-lettered after"] == 3


def test_burst_by_copy_while_draining_has_no_deadlocks(dsn, tmp_path):
    report = show(scenarios.burst(Env(dsn, tmp_path), "ci"))
    report.check()
    assert report.notes["deadlocks"] == 0
    assert report.notes["deadlock errors in logs"] == 0


def test_listen_terminated_falls_back_to_polling_then_push(dsn, tmp_path):
    report = show(scenarios.listen_terminated(Env(dsn, tmp_path), "ci"))
    report.check()
    # Polling every 10 s still picks jobs up while LISTEN is gone (bounded by the timeout in
    # the scenario). After the listener is back, a job enqueued half a second after the
    # reconnect starts long before the next poll (~10 s away): it was pushed. 5 s of slack.
    assert report.notes["push again pickup (ms)"] < 5000


def test_claim_replies_late_past_the_lease_run_nothing_twice(dsn, tmp_path):
    report = show(scenarios.late_claim_replies(Env(dsn, tmp_path), "ci"))
    report.check()
    assert report.duplicates == 0  # nothing was interrupted
    assert report.notes["jobs started twice"] == 0
    assert report.notes["claims held back"] == report.faults == 4
    assert (
        report.notes["late claims confirmed"] + report.notes["late claims with jobs taken back"]
        >= 1
    ), "no claim came late: the scenario proved nothing"


def test_handlers_blocking_the_loop_run_once(dsn, tmp_path):
    report = show(scenarios.loop_stalls(Env(dsn, tmp_path), "ci"))
    report.check()  # nothing was interrupted, so no duplicate at all
    assert report.interrupted == 0 and report.duplicates == 0
    assert report.faults >= 5, "too few stalls: the scenario proved little"
    assert report.notes["leases lost"] == 0
    assert report.notes["jobs started twice"] == 0


def test_a_log_pipe_nobody_reads_stalls_nothing(dsn, tmp_path):
    report = show(scenarios.unread_log_pipe(Env(dsn, tmp_path), "ci"))
    report.check()
    assert report.duplicates == 0 and report.notes["jobs started twice"] == 0
    assert report.notes["drop reports"] > 0, "the pipe never filled: the scenario proved nothing"


def test_child_processes_dying_fail_only_their_jobs(dsn, tmp_path):
    report = show(scenarios.child_crashes(Env(dsn, tmp_path), "ci"))
    report.check()
    assert report.faults >= 10
    assert report.duplicates == 0  # a crashed attempt never reached its end record
    assert report.notes["workers that exited"] == 0
    assert report.notes["reaped"] == 0, "crashed jobs waited for the reaper instead of failing"


def test_failover_to_a_synchronous_standby_loses_nothing(dsn, tmp_path):
    report = show(scenarios.failover(Env(dsn, tmp_path), "ci"))
    report.check()
    assert report.faults == 1 and report.notes["enqueued before the crash"] > 0
    # Nobody restarted anything: the same two workers found the new primary themselves.
    assert report.notes["worker processes"] == 2 and report.notes["workers that exited"] == 0
    assert report.notes["first job done after the promote (s)"] is not None
    # A retried ack whose first try committed says so, never that a lease was lost.
    assert report.notes["stale ack warnings"] == 0
    assert report.notes["enqueues the failover rolled back"] == 0


def test_the_check_allows_only_what_a_scenario_loses_by_design():
    # Scenario 13b at full size: the lag's last enqueues had not run when the primary died.
    Report("13b", enqueued=100, lost=30, lost_by_design=30).check()
    with pytest.raises(AssertionError, match="31 jobs lost"):
        Report("13b", enqueued=100, lost=31, lost_by_design=30).check()
    with pytest.raises(AssertionError, match="1 jobs lost"):
        Report("1", enqueued=100, lost=1).check()


def test_failover_to_a_lagging_asynchronous_standby_loses_only_the_lag(dsn, tmp_path):
    report = show(scenarios.failover_async(Env(dsn, tmp_path), "ci"))
    # The harness's own check, as `python -m benchmarks.chaos` applies it (it counted the lag's
    # enqueues that had not run as lost jobs and failed the full-size run).
    report.check()
    assert report.stale_acks == report.stale_writes == 0
    assert report.notes["worker processes"] == 2 and report.notes["workers that exited"] == 0
    assert report.notes["still queued"] == 0
    # What a lagging standby costs: the enqueues it had not received are gone, nothing older.
    assert report.notes["enqueued during the lag"] > 0
    assert report.lost <= report.notes["enqueues the failover rolled back"]
    assert report.notes["rolled back from before the lag"] == 0


def test_durable_jobs_under_sigkill_and_restarts(own_server, tmp_path):
    env = Env(own_server.dsn, tmp_path, restart=lambda: own_server.restart("immediate"))
    report = show(durable.durable_jobs(env, "ci"))
    # Nothing lost; B's effects exactly once; no step function ran after its checkpoint
    # committed; re-runs within the interrupted; every wait woken by its committed emit.
    report.check()
    assert report.notes["restarts"] >= 1 and report.notes["SIGKILLs"] >= 2
    assert report.interrupted > 0, "no fault hit a running job: the scenario proved little"
    assert report.durable_jobs == report.enqueued == report.tx_jobs
    # Both ways an event reaches a wait happened, and rolled-back emits were there to ignore.
    assert report.notes["events emitted before the wait"] > 0
    assert report.notes["events emitted while it waited"] > 0
    assert report.notes["emits rolled back"] > 0


def test_a_held_snapshot_loses_nothing_and_the_sizes_come_back(dsn, tmp_path):
    report = show(horizon.held_snapshot(Env(dsn, tmp_path), "ci"))
    report.check()
    assert report.duplicates == 0 and report.faults == 1
    assert report.notes["jobs started twice"] == 0
    before, peak, after = report.notes["indexes MB before / peak / after"]
    assert peak > horizon.GOAL * before, "the hold bloated nothing: the scenario proved little"
    # Back to at most twice the size before the hold, by the workers alone.
    assert report.notes["back to size after (s)"] is not None
    assert after <= horizon.GOAL * before
    assert report.notes["maintenance steps"]["reindex"] > 0
