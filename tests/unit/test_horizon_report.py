"""What `pgq status`, the dashboard and the metrics make of the rows of `pgqueue.horizon`: which
holder is named, past which threshold, and in what words (pure: no database)."""

from __future__ import annotations

from pgqueue.db.horizon import WARN_XMIN_AGE, Horizon, SnapshotHolder


def holder(**fields: object) -> SnapshotHolder:
    row: dict[str, object] = {
        "holder": "backend",
        "pid": 4242,
        "name": "psql",
        "role": "analyst",
        "state": "idle in transaction",
        "since": None,
        "age_seconds": 312.4,
        "xmin": "1234",
        "xmin_age": 51200,
        "catalog_only": False,
    }
    return SnapshotHolder(**{**row, **fields})  # type: ignore[arg-type]


def test_the_warning_names_the_backend_its_state_and_age():
    report = Horizon([holder()], [])
    assert report.warning(60) == (
        "snapshot held for 312 s by backend pid 4242 (application_name 'psql', state idle in "
        "transaction, role analyst, xmin age 51,200): VACUUM cannot remove dead rows until it ends"
    )
    assert report.warning(600) is None
    assert report.oldest_age_seconds == 312.4 and report.oldest_xmin_age == 51200


def test_nothing_held_is_no_warning_and_zero_age():
    report = Horizon([], [])
    assert report.warning(0) is None
    assert (report.oldest_age_seconds, report.oldest_xmin_age, report.oldest) == (0.0, 0, None)


def test_a_slot_has_no_age_and_is_judged_by_its_xmin_age():
    slot = holder(
        holder="replication slot", pid=None, name="replica_1", role=None, state="inactive",
        age_seconds=None, xmin_age=WARN_XMIN_AGE + 1,
    )  # fmt: skip
    warning = Horizon([slot], []).warning(60)
    assert warning is not None
    assert warning.startswith("snapshot held by replication slot (name 'replica_1', state inactive")
    young = slot._replace(xmin_age=WARN_XMIN_AGE - 1)
    assert Horizon([young], []).warning(60) is None


def test_a_logical_slots_catalog_xmin_is_shown_but_never_warned_about():
    catalogs = holder(holder="replication slot", pid=None, age_seconds=None, catalog_only=True,
                      xmin_age=10 * WARN_XMIN_AGE)  # fmt: skip
    backend = holder(age_seconds=5.0, xmin_age=10)
    report = Horizon([catalogs, backend], [])
    assert report.oldest == backend and report.oldest_xmin_age == 10
    assert report.warning(60) is None
    assert report.as_dict(1)["warning"] is not None  # the backend, past a 1 s threshold
