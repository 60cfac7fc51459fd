"""What the maintenance service rebuilds: the rules, apart from the database.

A held snapshot keeps every row version deleted or updated while it lasts; once it ends,
VACUUM can remove them, but a B-tree never gives its emptied pages back and a table shrinks
only from its end (and not at all while dead line pointers that an index cleanup skipped are
left in it). Each of pgqueue's tables and B-tree indexes comes with its size and an estimate of
what it would take rebuilt (view ``pgqueue.bloat``); a relation is bloated when it takes more
than ``factor`` times that, and the difference is worth the work (``min_bytes``).

Estimates are rough (a partial index holds fewer entries than its table has rows), so a
relation the service already brought down is judged against the size it reached then (its
:class:`Floor`): the same index is not rebuilt every pass because the estimate is too small
for it. A floor holds while the live data stays about what it was then: brought down while a
backlog filled the table (whose last pages a VACUUM then cannot cut off), a relation is tried
again once that backlog has drained.

A VACUUM that gave nothing back says nothing about the estimate: the rows it found at the
table's end were still visible to a transaction that began before they were deleted (a
draining worker's, a young snapshot), and a moment later they are not. Its floor holds for a
few passes only (:func:`floor_after`): 1, then 2, 4, ... up to :data:`MAX_SKIPPED_PASSES`
while such VACUUMs follow one another. Without that, a table emptied meanwhile kept the size it
had then for good (the live rows were ~0 before and after, so the floor never gave way).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Defaults of :class:`Thresholds` (and of ``pgq maintain``).
BLOAT_FACTOR = 2.0
MIN_BYTES = 256 * 1024  # 32 pages: below this, a rebuild wins too little to be worth it
#: The most passes a VACUUM that gave nothing back keeps its table from being tried again.
MAX_SKIPPED_PASSES = 64


@dataclass(frozen=True)
class Relation:
    """A row of ``pgqueue.bloat`` as the service reads it."""

    kind: str  # "table" or "index"
    table: str
    name: str  # the table's or the index's name
    bytes: int
    estimated_bytes: int | None  # rebuilt (None: not estimated, a GIN index)
    valid: bool  # an index a failed REINDEX CONCURRENTLY left is not
    ours: bool  # this session may VACUUM and REINDEX it (it owns the table)


@dataclass(frozen=True)
class Thresholds:
    """When a relation counts as bloated."""

    factor: float = BLOAT_FACTOR
    min_bytes: int = MIN_BYTES

    def bloated(self, relation: Relation, floor: Floor | None = None) -> bool:
        """More than ``factor`` times its estimated size (or its ``floor``'s, what the service
        last brought it down to, when larger and still standing), and at least ``min_bytes``
        more."""
        estimate = relation.estimated_bytes
        if estimate is None or not relation.valid:
            return False
        target = estimate
        if floor is not None and not self.shrank(floor.estimated_bytes, estimate):
            target = max(target, floor.bytes)
        return relation.bytes > self.factor * target and relation.bytes - target >= self.min_bytes

    def shrank(self, then: int, now: int) -> bool:
        """The live data is less than 1/``factor`` of what it was."""
        return now * self.factor < then


@dataclass(frozen=True)
class Floor:
    """A relation as the service last left it: its size, and its estimate then. ``until``:
    for a VACUUM that gave nothing back, the pass from which it no longer holds (None: it
    holds while the live data stays about the same); ``misses``: how many such VACUUMs in a
    row."""

    bytes: int
    estimated_bytes: int
    until: int | None = None
    misses: int = 0


def floor_after(
    previous: Floor | None, vacuum: bool, before: int, after: int, estimated: int, at_pass: int
) -> Floor:
    """The floor a step leaves (``vacuum``: a VACUUM, else a REINDEX), done in pass
    ``at_pass``, that took the relation from ``before`` to ``after`` bytes."""
    if not vacuum or after < before:
        return Floor(after, estimated)
    misses = previous.misses + 1 if previous is not None and previous.until is not None else 1
    return Floor(after, estimated, at_pass + min(2 ** (misses - 1), MAX_SKIPPED_PASSES), misses)


def standing(floors: Mapping[str, Floor], at_pass: int) -> dict[str, Floor]:
    """The floors that still hold in pass ``at_pass``."""
    return {name: f for name, f in floors.items() if f.until is None or at_pass < f.until}


def to_vacuum(
    relations: Iterable[Relation], limits: Thresholds, floors: Mapping[str, Floor]
) -> list[Relation]:
    """Tables to ``VACUUM (INDEX_CLEANUP ON)``: bloated themselves, or with a bloated index
    (the VACUUM removes its dead entries first, and refreshes the counts the estimate reads)."""
    relations = list(relations)
    wanted = {r.table for r in relations if r.ours and limits.bloated(r, floors.get(r.name))}
    return [r for r in relations if r.kind == "table" and r.name in wanted]


def to_rebuild(
    relations: Iterable[Relation], limits: Thresholds, floors: Mapping[str, Floor]
) -> list[Relation]:
    """Indexes to ``REINDEX INDEX CONCURRENTLY``, largest waste first."""
    bloated = [
        r
        for r in relations
        if r.kind == "index" and r.ours and limits.bloated(r, floors.get(r.name))
    ]
    bloated.sort(key=lambda r: r.bytes - (r.estimated_bytes or 0), reverse=True)
    return bloated


def not_ours(relations: Iterable[Relation], limits: Thresholds) -> list[str]:
    """Bloated relations this session may not maintain (another role owns their table)."""
    return [r.name for r in relations if not r.ours and limits.bloated(r)]
