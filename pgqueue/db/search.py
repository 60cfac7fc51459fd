"""Job search as a plan: filters, keyset pages over the three places a job can be, cursors.

A job is in exactly one of ``jobs`` (live), ``job_history`` (succeeded, cancelled) or
``dead_letters`` (dead). Each place is read newest first by a key of its own, which an index
of that place can walk from any position:

=========  ======================  ============================================
place      key                     time shown (and merged on)
=========  ======================  ============================================
live       ``id``                  ``created_at`` (ids are handed out in order)
history    ``(finished_at, id)``   ``finished_at``
dead       ``(dead_at, id)``       ``dead_at`` (as ``finished_at``)
=========  ======================  ============================================

A page asks each place it needs for ``limit + 1`` rows after the cursor's position there (one
index range each, at any depth), merges the streams by time (newest first, taking rows from
the heads only, so each place contributes a prefix of its stream) and keeps ``limit``. The
cursor records, per place, the key of the last row it contributed, or that the place is done;
it is opaque to callers (``v1.`` + base64url JSON). No offset is ever used, so page 1,000 costs
what page 1 does.

Filters are parameters of three fixed named queries (``search_live_jobs``,
``search_job_history``, ``search_dead_letters``), each optional as ``%(x)s IS NULL OR ...``,
executed unprepared so each is planned with its values. The conditions are written once, in the
``search_filter`` fragment the three queries include (each names its table's columns the same
way). Adding a filter (tags, metadata) is one :class:`JobFilter` field (its metadata is its
``pgq jobs search`` option), one parameter and one condition in the fragment, as ``args`` is.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, get_args

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from pgqueue.db.plan import Plan, Query, fetch_all, fetch_first
from pgqueue.errors import InvalidCursorError, InvalidJobError, SearchTimeoutError
from pgqueue.rules.durations import parse_duration
from pgqueue.rules.flags import Flag
from pgqueue.rules.options import MAX_JOB_ID, check_meta, check_tags
from pgqueue.rules.vocabulary import (
    HISTORY_STATES,
    JOB_STATES,
    LIVE_STATES,
    PLACE_TABLES,
    DeadState,
)

STATES = JOB_STATES
PLACES = tuple(PLACE_TABLES)


class SearchRow(NamedTuple):
    """A row of the search queries (``search_live_jobs``, ``search_job_history``,
    ``search_dead_letters``): every place gives all of them; None where a place has no such
    thing (live jobs have not finished, finished ones do not run again)."""

    id: int
    state: str
    queue: str
    task: str
    priority: int
    attempts: int
    max_attempts: int
    created_at: datetime
    run_at: datetime | None
    finished_at: datetime | None
    error_class: str | None
    last_error: str | None
    tags: list[str] | None


class FoundJob(NamedTuple):
    """A row of ``find_job``: where the job is, and its row there as JSON."""

    place: str
    job: dict[str, Any]


class WorkflowLink(NamedTuple):
    """A row of ``workflow_of_job``: the job's node and workflow, and one neighbour (a parent
    or a dependent; None when it has none)."""

    workflow_id: int
    workflow_name: str | None
    node_name: str | None
    role: str
    job_id: int | None
    relation: str
    job_name: str | None
    task: str | None
    state: str | None


#: The columns of a search result row: a :class:`SearchRow` and the place it was found.
COLUMNS = ("id", "place", *SearchRow._fields[1:])
MAX_PAGE = 1000  # rows per page: a page is read whole, from each place it needs
DEFAULT_TIMEOUT = 10.0  # seconds a page may take; see SearchTimeoutError
_QUERIES = {
    "live": "search_live_jobs",
    "history": "search_job_history",
    "dead": "search_dead_letters",
}
#: The states a job can have in each place (the search_filter fragment's ``s.state``).
_PLACE_STATES: dict[str, tuple[str, ...]] = {
    "live": LIVE_STATES,
    "history": HISTORY_STATES,
    "dead": get_args(DeadState),
}
#: The times the search options take, as their help says (see :func:`parse_time`).
TIME_HELP = "ISO 8601 (UTC if no offset) or an age such as 30m, 2h, 7d."
#: A time filter's value: a moment (an aware datetime), or an age (a timedelta: that long
#: before the database's clock when the search runs; never the caller's clock, which may be
#: set wrong).
Moment = datetime | timedelta
#: The time filters, in (lower bound, upper bound) pairs.
_TIME_RANGES = (("since", "until"), ("finished_since", "finished_until"))
_CURSOR_PREFIX = "v1."
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DONE = "done"


def _flag(help: str, *spelling: Any, **more: Any) -> dict[str, Flag]:
    """A filter's metadata: its ``pgq jobs search`` option (see :class:`Flag`)."""
    return {"flag": Flag(help, *spelling, **more)}


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What a search selects; None (or empty) means "any". Times are timezone-aware;
    ``since``/``until`` bound when the job was enqueued (``created_at``),
    ``finished_since``/``finished_until`` when it finished (succeeded, cancelled or died: a
    finished range leaves live jobs out). ``args``: the job's args contain this object
    (``jsonb @>``). ``error``: an attempt's error class or message contains this text
    (case-insensitive). ``tags``: the job has every one of these tags. ``meta``: the job's
    metadata contains this object (``jsonb @>``: ``{"tenant": "acme"}``)."""

    # Each field's metadata is its pgq jobs search option (pgqueue/cli/search_cmd.py makes
    # them; the fields are in the order --help lists them).
    id: int | None = field(
        default=None, metadata=_flag("Only this job id.", names=("--id",), low=1, high=MAX_JOB_ID)
    )
    task: str | None = field(default=None, metadata=_flag("Only this task."))
    queue: str | None = field(
        default=None, metadata=_flag("Only this queue.", names=("--queue", "-q"))
    )
    states: tuple[str, ...] | None = field(
        default=None,
        metadata=_flag(
            f"Only jobs in this state (repeat for several): {', '.join(STATES)}.",
            "states",
            "STATE",
            ("--state",),
        ),
    )
    error: str | None = field(
        default=None, metadata=_flag("An attempt's error class or message contains this text.")
    )
    args: Mapping[str, Any] | None = field(
        default=None,
        metadata=_flag(
            "The job's args contain KEY=VALUE (VALUE as JSON if it parses, else text; repeat to "
            "combine) or a JSON object.",
            "pairs",
            "KEY=VALUE",
        ),
    )
    tags: tuple[str, ...] | None = field(
        default=None,
        metadata=_flag(
            "Only jobs with this tag (repeat: jobs with all of them).", "tags", "TAG", ("--tag",)
        ),
    )
    meta: Mapping[str, Any] | None = field(
        default=None,
        metadata=_flag(
            "The job's metadata contains KEY=VALUE (VALUE as JSON if it parses, else text; "
            "repeat to combine) or a JSON object.",
            "pairs",
            "KEY=VALUE",
        ),
    )
    since: Moment | None = field(
        default=None, metadata=_flag(f"Enqueued at or after this. {TIME_HELP}", "time", "TIME")
    )
    until: Moment | None = field(
        default=None, metadata=_flag("Enqueued before this.", "time", "TIME")
    )
    finished_since: Moment | None = field(
        default=None,
        metadata=_flag("Finished (succeeded, cancelled, died) at or after.", "time", "TIME"),
    )
    finished_until: Moment | None = field(
        default=None, metadata=_flag("Finished before this.", "time", "TIME")
    )

    def __post_init__(self) -> None:
        if self.id is not None and not _is_job_id(self.id):
            raise InvalidJobError(f"id must be a job id (1 to {MAX_JOB_ID}), got {self.id!r}")
        if self.states is not None:
            if isinstance(self.states, str):
                object.__setattr__(self, "states", (self.states,))
            unknown = [s for s in self.states or () if s not in STATES]
            if unknown:
                raise InvalidJobError(f"unknown state {unknown[0]!r}: one of {', '.join(STATES)}")
            if not self.states:
                object.__setattr__(self, "states", None)
        for name in ("task", "queue", "error"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidJobError(f"{name} must be a non-empty string, got {value!r}")
        if self.args is not None:
            if not isinstance(self.args, Mapping) or not all(isinstance(k, str) for k in self.args):
                raise InvalidJobError("args must be an object with string keys (JSON)")
            try:
                json.dumps(dict(self.args), allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise InvalidJobError(f"args must be JSON: {exc}") from None
        if self.tags is not None:
            object.__setattr__(self, "tags", check_tags(self.tags) or None)
        if self.meta is not None:
            object.__setattr__(self, "meta", check_meta(self.meta) or None)
        for low, high in _TIME_RANGES:
            for name in (low, high):
                when = getattr(self, name)
                if isinstance(when, timedelta):
                    if when < timedelta(0):
                        raise InvalidJobError(f"{name} as an age must not be negative")
                elif when is not None and (not isinstance(when, datetime) or when.tzinfo is None):
                    raise InvalidJobError(
                        f"{name} must be a timezone-aware datetime or an age (a timedelta)"
                    )
            start, end = getattr(self, low), getattr(self, high)
            # An age and a moment compare only by the database's clock: not checked here.
            if isinstance(start, datetime) and isinstance(end, datetime) and start >= end:
                raise InvalidJobError(f"{low} must be earlier than {high}")
            if isinstance(start, timedelta) and isinstance(end, timedelta) and start <= end:
                raise InvalidJobError(f"{low} must be earlier than {high} (a longer age)")

    def places(self) -> tuple[str, ...]:
        """The places that can hold a matching job."""
        wanted = set(self.states or STATES)
        finished = self.finished_since is not None or self.finished_until is not None
        chosen = []
        if wanted & set(LIVE_STATES) and not finished:
            chosen.append("live")
        if wanted & set(HISTORY_STATES):
            chosen.append("history")
        if "dead" in wanted:
            chosen.append("dead")
        return tuple(chosen)

    def params(self, place: str) -> dict[str, Any]:
        states = None
        if self.states is not None:
            states = [s for s in self.states if s in _PLACE_STATES[place]]
        return {
            "id": self.id,
            "task": self.task,
            "queue": self.queue,
            "states": states,
            "error": self.error,
            "args": None if self.args is None else Jsonb(dict(self.args)),
            **self._times(),
            "tags": None if self.tags is None else list(self.tags),
            "meta": None if self.meta is None else Jsonb(dict(self.meta)),
        }

    def _times(self) -> dict[str, datetime | timedelta | None]:
        """Each time filter as two parameters, ``NAME`` (a moment) and ``NAME_age`` (an age,
        which the query counts back from its own ``now()``)."""
        times: dict[str, datetime | timedelta | None] = {}
        for name in (name for pair in _TIME_RANGES for name in pair):
            when = getattr(self, name)
            times[name] = when if isinstance(when, datetime) else None
            times[f"{name}_age"] = when if isinstance(when, timedelta) else None
        return times


@dataclass(frozen=True, slots=True)
class SearchPage:
    """One page of results, newest first, and the cursor of the next page (None: this was
    the last one)."""

    jobs: list[dict[str, Any]] = field(default_factory=list)
    cursor: str | None = None


# A place's position: None (not started), a key (after this row), or _DONE.
Position = tuple[int, ...] | str | None


def encode_cursor(positions: Mapping[str, Position]) -> str:
    data = {place[0]: list(p) if isinstance(p, tuple) else p for place, p in positions.items()}
    raw = json.dumps({k: v for k, v in data.items() if v is not None}, separators=(",", ":"))
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> dict[str, Position]:
    """The positions a cursor holds; :class:`InvalidCursorError` for anything a search page did
    not hand out."""
    bad = InvalidCursorError(
        "invalid cursor (pass the cursor a previous page of the same search returned)"
    )
    if not isinstance(cursor, str) or not cursor.startswith(_CURSOR_PREFIX):
        raise bad
    body = cursor.removeprefix(_CURSOR_PREFIX)
    try:
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError):
        raise bad from None
    if not isinstance(data, dict) or not set(data) <= {"l", "h", "d"}:
        raise bad
    positions: dict[str, Position] = {}
    for place in PLACES:
        value = data.get(place[0])
        if value is None or value == _DONE:
            positions[place] = value
            continue
        size = 1 if place == "live" else 2
        if (
            not isinstance(value, list)
            or len(value) != size
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            or not 1 <= value[-1] <= MAX_JOB_ID
        ):
            raise bad
        if size == 2:
            try:
                _time(value[0])
            except OverflowError:
                raise bad from None
        positions[place] = tuple(value)
    return positions


def _is_job_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_JOB_ID


def _micros(when: datetime) -> int:
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _time(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def search(
    where: JobFilter,
    *,
    limit: int = 50,
    after: str | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> Plan[SearchPage]:
    """The plan of one page (run it with ``atomic=True``: the time limit is a ``SET LOCAL``).
    Arguments are checked here, before any connection is taken."""
    if not isinstance(where, JobFilter):
        raise InvalidJobError("where must be a JobFilter")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
        raise InvalidJobError(f"limit must be between 1 and {MAX_PAGE}, got {limit!r}")
    positions: dict[str, Position] = (
        decode_cursor(after) if after is not None else dict.fromkeys(PLACES)
    )
    if timeout is not None and not 0 < timeout <= 86_400:
        raise InvalidJobError(f"timeout must be between 0 and 86400 seconds, got {timeout}")
    return _search(where, limit, positions, timeout)


def _search(
    where: JobFilter, limit: int, positions: dict[str, Position], timeout: float | None
) -> Plan[SearchPage]:
    if timeout is not None:
        yield Query("set_search_timeout", {"timeout_ms": str(max(1, round(timeout * 1000)))})
    places = [p for p in where.places() if positions.get(p) != _DONE]
    fetched: dict[str, list[dict[str, Any]]] = {}
    for place in places:
        params = {**where.params(place), **_after(place, positions.get(place)), "limit": limit + 1}
        rows = yield from fetch_all(
            _QUERIES[place], params, row=class_row(SearchRow), prepare=False
        )
        fetched[place] = [{"id": row.id, "place": place, **row._asdict()} for row in rows]
    page = list(_merged(fetched.values(), limit))
    taken = {place: [job for job in page if job["place"] == place] for place in fetched}
    next_positions: dict[str, Position] = {p: _DONE for p in PLACES}
    for place in places:
        mine = taken[place]
        if len(mine) == len(fetched[place]):
            continue  # all of them fit: the place has nothing more (it returned <= limit)
        next_positions[place] = _key(mine[-1]) if mine else positions.get(place)
    more = any(p != _DONE for p in next_positions.values())
    return SearchPage(page, encode_cursor(next_positions) if more else None)


def _after(place: str, position: Position) -> dict[str, Any]:
    if not isinstance(position, tuple):
        return {"after_id": None} if place == "live" else {"after_at": None, "after_id": None}
    if place == "live":
        return {"after_id": position[0]}
    return {"after_at": _time(position[0]), "after_id": position[1]}


def _when(job: dict[str, Any]) -> tuple[datetime, int]:
    return (job["created_at"] if job["place"] == "live" else job["finished_at"]), job["id"]


def _key(job: dict[str, Any]) -> tuple[int, ...]:
    if job["place"] == "live":
        return (job["id"],)
    return (_micros(job["finished_at"]), job["id"])


def _merged(streams: Iterable[list[dict[str, Any]]], limit: int) -> Iterable[dict[str, Any]]:
    # heapq.merge compares the streams' heads only, so what it takes from each is a prefix of
    # it, even where a stream is not perfectly ordered by time (live jobs come by id).
    for count, job in enumerate(heapq.merge(*streams, key=_when, reverse=True)):
        if count == limit:
            return
        yield job


def parse_time(value: str) -> Moment:
    """A time as operators type it: ISO 8601 (no offset means UTC), or an age ("30m", "2h",
    "7d": that long before the database's clock, as a timedelta). InvalidJobError says which
    forms are accepted."""
    try:
        return timedelta(seconds=parse_duration(value))
    except (ValueError, OverflowError):
        pass
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidJobError(
            f"{value!r} is not a time: use ISO 8601 (2026-11-30, 2026-11-30T14:00:00+01:00) "
            "or an age (30m, 2h, 7d)"
        ) from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def parse_args_filter(pairs: Iterable[str]) -> dict[str, Any] | None:
    """``KEY=VALUE`` pairs (VALUE as JSON when it parses, else the text itself: ``n=3`` is the
    number, ``n="3"`` the string) or JSON objects, merged into the object ``args`` must
    contain; None for no pairs. InvalidJobError names a malformed one."""
    contains: dict[str, Any] | None = None
    for pair in pairs:
        contains = {**(contains or {}), **_pair(pair)}
    return contains


def _pair(value: str) -> dict[str, Any]:
    if value.lstrip().startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise InvalidJobError(f"{value!r} is not a JSON object: {exc}") from None
        if not isinstance(parsed, dict):
            raise InvalidJobError(f"{value!r} is not a JSON object")
        return parsed
    key, sep, raw = value.partition("=")
    if not sep or not key:
        raise InvalidJobError(f"{value!r}: expected KEY=VALUE (or a JSON object)")
    try:
        decoded: Any = json.loads(raw)
    except ValueError:
        decoded = raw
    return {key: decoded}


def timed_out(timeout: float | None) -> SearchTimeoutError:
    return SearchTimeoutError(
        f"the search took longer than {timeout:g} s: narrow it (a task, a queue, a state, a "
        "time range) or allow it longer"
    )


ACTIONS = {
    "waiting": ("cancel",),
    "scheduled": ("retry", "cancel"),
    "ready": ("cancel",),
    "running": ("cancel",),
    "dead": ("replay",),
}


def job_detail(job_id: int) -> Plan[dict[str, Any] | None]:
    """Every column of one job wherever it is (``place``: live, history or dead; ``state``),
    its workflow and neighbours there (``workflow``: None outside one), and the operator
    actions its state allows (``actions``: cancel, retry, replay)."""
    if not _is_job_id(job_id):
        raise InvalidJobError(f"job id must be between 1 and {MAX_JOB_ID}, got {job_id!r}")
    return _job_detail(job_id)


def _job_detail(job_id: int) -> Plan[dict[str, Any] | None]:
    found = yield from fetch_first("find_job", {"id": job_id}, row=class_row(FoundJob))
    if found is None:
        return None
    place, job = found.place, found.job
    state = "dead" if place == "dead" else job["state"]
    links = yield from fetch_all("workflow_of_job", {"id": job_id}, row=class_row(WorkflowLink))
    workflow = None
    if links:
        node = links[0]
        neighbours = [
            {
                "id": link.job_id,
                "relation": link.relation,
                "name": link.job_name,
                "task": link.task,
                "state": link.state,
            }
            for link in links
            if link.job_id is not None
        ]
        workflow = {
            "id": node.workflow_id,
            "name": node.workflow_name,
            "node_name": node.node_name,
            "role": node.role,
            "parents": [n for n in neighbours if n["relation"] == "parent"],
            "dependents": [n for n in neighbours if n["relation"] == "dependent"],
        }
    return {
        **job,
        "place": place,
        "state": state,
        "workflow": workflow,
        "actions": list(ACTIONS.get(state, ())),
    }
