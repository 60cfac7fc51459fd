"""Job specs: a call's options validated and its task's defaults applied (pure, no I/O).

:func:`make_spec` validates a call and resolves defaults into a :class:`JobSpec`, the one value
every enqueue path writes (the plans are in :mod:`pgqueue.db.enqueue_plans`); :class:`JobId` is
what an enqueue returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, Self

from typing_extensions import TypeVar

from pgqueue.errors import InvalidJobError
from pgqueue.rules.dedupe import derived_key
from pgqueue.rules.options import (
    DEFAULTS,
    MAX_META_BYTES,
    OPTION_NAMES,
    check_int,
    check_options,
    merge_meta,
    merge_tags,
)
from pgqueue.rules.payload import check_name, dumps

# What the job's task function returns, when the JobId came from a task's enqueue (a type checker's
# knowledge only); Any for a job enqueued by task name. A default, so a bare ``JobId`` in a
# user's annotation stays valid under ``mypy --strict``.
ResultT_co = TypeVar("ResultT_co", covariant=True, default=Any)


class JobId(int, Generic[ResultT_co]):
    """A job id (an ``int``) that also tells what this call did.

    For a type checker, ``JobId[R]`` is the id of a job of a task whose function returns ``R``
    (a coroutine, for an ``async def``): ``task.enqueue(...)`` returns one, and
    ``pgq.result(job_id)`` is then typed ``R`` (what the coroutine returns). A bare ``JobId``
    is ``JobId[Any]`` (a job enqueued by task name).

    ``created`` is False when an idempotency key matched an existing job and its id was
    returned; ``replaced`` is True when that job had not started and this call replaced its
    arguments (``on_conflict="replace"`` or ``"replace_args"``).
    """

    # Class defaults: bulk enqueue makes one JobId per job, and most were created, so only
    # the exceptions carry an attribute of their own.
    created: bool = True
    replaced: bool = False

    def __new__(cls, value: int, created: bool = True, replaced: bool = False) -> Self:
        self = super().__new__(cls, value)
        if not created:
            self.created = False
        if replaced:
            self.replaced = True
        return self

    def __repr__(self) -> str:
        replaced = ", replaced=True" if self.replaced else ""
        return f"JobId({int(self)}, created={self.created}{replaced})"

    __str__ = int.__repr__  # str(job_id) == "42", as for any int


@dataclass(slots=True)
class JobSpec:
    """A fully validated job, ready to be written."""

    task: str
    args_json: str
    queue: str
    priority: int
    max_attempts: int
    run_at: datetime | None = None
    delay: timedelta | None = None
    idempotency_key: str | None = None
    concurrency_key: str | None = None
    #: keep the idempotency key this long after the job finished in one of unique_states
    unique_for: timedelta | None = None
    unique_states: tuple[str, ...] | None = None
    #: seconds to wait for room in a full queue (max_depth) before raising QueueFullError
    wait_if_full: float | None = None
    #: Keep the return value this long (None: the ack is a plain DELETE; see pgq.result()).
    result_ttl: timedelta | None = None
    #: Ids of jobs that must succeed first (the job waits until they have).
    depends_on: tuple[int, ...] = ()
    #: The job's metadata as JSON text (a JSON object), None when it has none.
    meta_json: str | None = None
    #: The job's tags, None when it has none.
    tags: tuple[str, ...] | None = None
    #: Derive idempotency_key from the task and its arguments (True: all; or these names).
    unique_by: bool | tuple[str, ...] = False
    #: Until when the job holds its key: "live" (it finishes) or "pending" (it starts).
    unique_among: str = "live"
    #: What enqueueing the key again does to a holder not yet running: keep, replace, ...
    on_conflict: str = "keep"
    #: At most one job per key per period.
    throttle: timedelta | None = None
    #: The id of the job that led to this one.
    caused_by: int | None = None

    def with_args_json(self, args_json: str, idempotency_key: str | None = None) -> JobSpec:
        """A copy with other arguments (and the key derived from them, if any). Bulk enqueue
        makes one per job: spelled out, because ``dataclasses.replace`` costs several times
        as much."""
        return JobSpec(
            self.task, args_json, self.queue, self.priority, self.max_attempts, self.run_at,
            self.delay, idempotency_key or self.idempotency_key, self.concurrency_key,
            self.unique_for, self.unique_states, self.wait_if_full, self.result_ttl,
            self.depends_on, self.meta_json, self.tags, self.unique_by, self.unique_among,
            self.on_conflict, self.throttle, self.caused_by,
        )  # fmt: skip

    def with_meta_json(self, meta_json: str | None) -> JobSpec:
        """A copy with other metadata (JSON text of an object)."""
        spec = self.with_args_json(self.args_json)
        spec.meta_json = meta_json
        return spec

    @property
    def tag_list(self) -> list[str] | None:
        """The tags as a list (what psycopg writes as ``text[]``), or None."""
        return list(self.tags) if self.tags is not None else None

    @property
    def unique_state_list(self) -> list[str] | None:
        """The final states that keep the key, as a list (``text[]``), or None."""
        return list(self.unique_states) if self.unique_states else None

    @property
    def has_mode(self) -> bool:
        """A deduplication mode other than the default (held while live, keep the holder)."""
        return self.unique_among != "live" or self.on_conflict != "keep" or bool(self.throttle)

    @property
    def needs_transaction(self) -> bool:
        """Writing this job takes more than one statement (``depends_on``: the workflow plan),
        so they must share a transaction."""
        return bool(self.depends_on)


#: The most rows one listing returns (the CLI's --limit takes the same range).
MAX_ROWS = 1_000_000


def check_row_limit(value: object, what: str = "limit") -> int:
    """A row count for a listing: 1 to :data:`MAX_ROWS` (a negative LIMIT is a database error,
    and a huge one a way to read a whole table by accident)."""
    return check_int(value, what, 1, MAX_ROWS)


def make_spec(
    task: str,
    args: Mapping[str, Any],
    options: Mapping[str, Any],
    *,
    defaults: Mapping[str, Any],
    payload_limit: int,
) -> JobSpec:
    """Validate one job and apply the task's defaults to the options the call left out."""
    return with_args(spec_template(task, options, defaults=defaults), args, payload_limit)


def with_args(template: JobSpec, args: Mapping[str, Any], payload_limit: int) -> JobSpec:
    """The job of ``template`` (validated task and options) with these arguments."""
    if type(args) is not dict and not isinstance(args, Mapping):  # (an ABC's check is Python)
        raise InvalidJobError(f"args must be a JSON object (a mapping), got {type(args).__name__}")
    plain = args if type(args) is dict else dict(args)
    try:
        args_json = dumps(plain, limit=payload_limit)
    except InvalidJobError:
        _name_the_argument(template.task, plain)
        raise
    unique_by = template.unique_by
    if unique_by and template.idempotency_key is None:
        names = unique_by if isinstance(unique_by, tuple) else None
        return template.with_args_json(args_json, derived_key(template.task, plain, names))
    return template.with_args_json(args_json)


def _name_the_argument(task: str, args: Mapping[str, Any]) -> None:
    """Raise for the first argument that cannot be stored on its own, naming it (the error
    path only: the whole object is encoded in one go otherwise)."""
    for name, value in args.items():
        try:
            dumps([value], limit=1 << 62, what="value")
        except InvalidJobError as exc:
            raise InvalidJobError(f"argument {name!r} of {task}: {exc}") from None


def spec_template(task: str, options: Mapping[str, Any], *, defaults: Mapping[str, Any]) -> JobSpec:
    """Validate a task name and options once, for every job that shares them (bulk enqueue
    validates each distinct (task, options) pair once, not once per job)."""
    check_name(task, "task name")
    given = {name: value for name, value in check_options(options).items() if value is not None}
    task_defaults = check_options(defaults)
    merged = {**DEFAULTS, **{k: v for k, v in task_defaults.items() if v is not None}, **given}
    _check_dedupe(given, merged)
    # Every option is a field of the job: its value, the task's, or the default.
    fields: dict[str, Any] = {name: merged.get(name) for name in OPTION_NAMES}
    wait = fields["wait_if_full"]
    fields["wait_if_full"] = wait.total_seconds() if wait is not None else None
    fields["depends_on"] = given.get("depends_on", ())  # a task's jobs depend on nothing
    # Metadata and tags add up: the call's keys over the task's, the call's tags after its.
    meta = merge_meta(task_defaults.get("meta"), given.get("meta"))
    del fields["meta"]
    fields["meta_json"] = None if meta is None else dumps(meta, limit=MAX_META_BYTES, what="meta")
    fields["tags"] = merge_tags(task_defaults.get("tags"), given.get("tags"))
    fields["unique_by"] = fields["unique_by"] or False
    fields["unique_among"] = fields["unique_among"] or "live"
    fields["on_conflict"] = fields["on_conflict"] or "keep"
    return JobSpec(task=task, args_json="{}", **fields)


#: The options that say anything about a job's key (unset, none of them costs a check).
_KEY_OPTIONS = frozenset(
    ("idempotency_key", "unique_by", "unique_among", "on_conflict", "throttle", "unique_for",
     "unique_states")
)  # fmt: skip


def _check_dedupe(given: Mapping[str, Any], merged: dict[str, Any]) -> None:
    """The key options together (see :mod:`pgqueue.rules.dedupe`); ``merged`` (the options set,
    nothing None) loses a task's ``unique_by`` when the call gives its own key."""
    if _KEY_OPTIONS.isdisjoint(merged):
        return
    if given.get("idempotency_key") is not None:
        if given.get("unique_by"):
            raise InvalidJobError("pass either idempotency_key or unique_by, not both")
        merged["unique_by"] = False
    keyed = merged.get("idempotency_key") is not None or bool(merged.get("unique_by"))
    if not keyed:
        if merged.get("unique_for") or merged.get("unique_states"):
            raise InvalidJobError(
                "unique_for and unique_states need an idempotency_key (or unique_by)"
            )
        modes = [
            name
            for name, default in (("unique_among", "live"), ("on_conflict", "keep"))
            if merged.get(name) not in (None, default)
        ] + (["throttle"] if merged.get("throttle") else [])
        if modes:
            raise InvalidJobError(
                f"{' and '.join(modes)} need{'s' if len(modes) == 1 else ''} a key: "
                "pass idempotency_key=... or unique_by=True (or the argument names)"
            )
    if merged.get("unique_states") and not merged.get("unique_for"):
        raise InvalidJobError("unique_states needs unique_for (how long to keep the key)")
    if merged.get("unique_among") == "pending" and (
        merged.get("unique_for") or merged.get("throttle")
    ):
        raise InvalidJobError(
            'unique_among="pending" releases the key when the job starts; unique_for and '
            "throttle keep it after the job finished: choose one"
        )
    if merged.get("throttle") and (merged.get("unique_for") or merged.get("unique_states")):
        raise InvalidJobError(
            "throttle keeps the key for the rest of its period whatever the job's end: "
            "leave out unique_for and unique_states"
        )
