"""What the maintenance service rebuilds (pgqueue/rules/maintenance.py)."""

from __future__ import annotations

from pgqueue.rules.maintenance import (
    MAX_SKIPPED_PASSES,
    Floor,
    Relation,
    Thresholds,
    floor_after,
    not_ours,
    standing,
    to_rebuild,
    to_vacuum,
)

KB = 1024
LIMITS = Thresholds(factor=2.0, min_bytes=256 * KB)


def index(
    name: str,
    size: int,
    estimate: int | None,
    *,
    valid: bool = True,
    ours: bool = True,
    table: str = "jobs",
) -> Relation:
    return Relation("index", table, name, size, estimate, valid, ours)


def table(name: str, size: int, estimate: int) -> Relation:
    return Relation("table", name, name, size, estimate, True, True)


def test_bloated_means_more_than_twice_the_estimate_and_worth_the_work():
    assert LIMITS.bloated(index("a", 2048 * KB, 100 * KB))
    assert not LIMITS.bloated(index("a", 190 * KB, 16 * KB))  # 12x, but only 174 kB to win
    assert not LIMITS.bloated(index("a", 1500 * KB, 1000 * KB))  # 1.5x
    assert not LIMITS.bloated(index("a", 9999 * KB, None))  # not estimated (GIN)
    assert not LIMITS.bloated(index("a", 9999 * KB, 8 * KB, valid=False))  # a leftover


def test_a_floor_stops_the_same_rebuild_every_pass_until_the_live_data_shrinks():
    rebuilt = index("a", 900 * KB, 100 * KB)
    assert LIMITS.bloated(rebuilt)  # the estimate is too small for this index
    floor = Floor(900 * KB, 100 * KB)
    assert not LIMITS.bloated(rebuilt, floor)
    assert LIMITS.bloated(index("a", 1900 * KB, 100 * KB), floor)  # grew past twice the floor
    # Brought down while a backlog filled it: tried again once the backlog drained.
    drained = index("a", 900 * KB, 8 * KB)
    assert LIMITS.bloated(drained, Floor(900 * KB, 600 * KB))
    assert not LIMITS.bloated(drained, Floor(900 * KB, 12 * KB))  # about as it was


def test_tables_are_vacuumed_for_their_own_bloat_or_an_index_of_theirs():
    relations = [
        table("jobs", 64 * KB, 8 * KB),
        index("jobs_pkey", 2048 * KB, 16 * KB),
        table("job_history", 4096 * KB, 256 * KB),
        table("workers", 16 * KB, 8 * KB),
        index("workers_pkey", 16 * KB, 8 * KB, table="workers"),
    ]
    assert [r.name for r in to_vacuum(relations, LIMITS, {})] == ["jobs", "job_history"]
    assert [r.name for r in to_rebuild(relations, LIMITS, {})] == ["jobs_pkey"]


def test_largest_waste_first_and_only_what_this_role_may_touch():
    relations = [
        index("small", 600 * KB, 8 * KB),
        index("large", 5000 * KB, 8 * KB),
        index("theirs", 5000 * KB, 8 * KB, ours=False, table="other"),
    ]
    assert [r.name for r in to_rebuild(relations, LIMITS, {})] == ["large", "small"]
    assert not_ours(relations, LIMITS) == ["theirs"]
    assert "other" not in {r.table for r in to_vacuum(relations, LIMITS, {})}


def test_a_vacuum_that_gave_nothing_back_holds_its_table_for_a_few_passes_only():
    """Its rows were still visible to someone a moment ago, not too many for the estimate: a
    table left as big as it was is tried again next pass, then after 2, 4, ... passes."""
    emptied = table("jobs", 4096 * KB, 0)
    floors: dict[str, Floor] = {}
    tried = []
    for at_pass in range(1, 40):
        if to_vacuum([emptied], LIMITS, standing(floors, at_pass)):
            tried.append(at_pass)
            floors["jobs"] = floor_after(floors.get("jobs"), True, 4096 * KB, 4096 * KB, 0, at_pass)
    assert tried == [1, 2, 4, 8, 16, 32]
    assert floors["jobs"].misses == 6
    # Never more than MAX_SKIPPED_PASSES apart.
    late = Floor(4096 * KB, 0, 1000, 30)
    assert floor_after(late, True, 1, 1, 0, 1000).until == 1000 + MAX_SKIPPED_PASSES


def test_a_step_that_gave_room_back_sets_a_floor_that_holds():
    vacuumed = floor_after(Floor(4096 * KB, 0, 9, 3), True, 4096 * KB, 900 * KB, 100 * KB, 9)
    assert vacuumed == Floor(900 * KB, 100 * KB)  # the misses start again
    assert standing({"jobs": vacuumed}, 10_000) == {"jobs": vacuumed}
    # A REINDEX that gained nothing: the estimate is too small for the index; it holds.
    rebuilt = floor_after(None, False, 900 * KB, 900 * KB, 100 * KB, 3)
    assert rebuilt == Floor(900 * KB, 100 * KB)
