"""Job and task options, each declared once.

An option is one key of a ``TypedDict``: its name and type are what type checkers check (the
TypedDicts are ``Unpack``-ed into ``@pgq.task(...)``, ``task.options(...)`` and
``pgq.enqueue(...)``), and the :class:`Check` in its ``Annotated`` metadata is how its value is
checked and normalised at run time, and what leaving it out means. Everything else reads these
declarations: the option names enqueue tells apart from task arguments, the validation, the
defaults a job gets, the options a task passes on to its jobs.

* :class:`JobBasics` (queue, priority, max_attempts): what a task, a cron schedule and a call
  may set;
* :class:`JobDefaults`: what a task declares for its jobs (``@pgq.task(queue="emails")``) and
  one call may override;
* :class:`JobOptions`: one call's options (``pgq.enqueue(..., delay=5)``, ``task.options(...)``);
* :class:`TaskOptions`: what ``@pgq.task(...)`` and ``@pgq.periodic(...)`` take besides the
  task's ``name`` and ``pass_context``;
* :class:`BatchOptions`: what makes ``@pgq.task(...)`` a batch task (``batch_size``,
  ``batch_wait``); :class:`BatchTaskOptions` is both.

A new option is one line in one of them (and the code that uses its value).
"""

# No ``from __future__ import annotations``: the checks are read from the annotations at run time.

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import (
    Annotated,
    Any,
    Literal,
    NotRequired,
    Required,
    TypedDict,
    cast,
    get_args,
    get_origin,
    get_type_hints,
)

from pgqueue.errors import ConfigurationError, InvalidJobError
from pgqueue.rules.dedupe import ON_CONFLICT, UNIQUE_AMONG, check_choice, check_unique_by
from pgqueue.rules.flags import Flag
from pgqueue.rules.flow_control import CircuitBreaker, RateLimit, check_limit
from pgqueue.rules.payload import check_name, check_unicode, dumps
from pgqueue.rules.retry import BackoffLike
from pgqueue.rules.vocabulary import FINISHED_STATES

#: Final states a job can keep its idempotency key in (with ``unique_for``).
UNIQUE_STATES = FINISHED_STATES
#: The largest job id (ids are bigint).
MAX_JOB_ID = 2**63 - 1
#: The longest delay, TTL or key lifetime: far beyond any real use, and small enough that the
#: database's ``now() + value`` is always a valid timestamp.
_MAX_YEARS = 1000
MAX_DURATION = timedelta(days=365 * _MAX_YEARS + _MAX_YEARS // 4)
_MAX_SECONDS = MAX_DURATION.total_seconds()
_MAX_KEY_LENGTH = 1000
#: The most jobs one batch handler call takes.
MAX_BATCH_SIZE = 10_000
_SMALLINT = (-32768, 32767)
#: The most JSON a job's metadata may take (after the task's and the call's are merged).
MAX_META_BYTES = 8192
#: The most tags a job may have, and the longest tag.
MAX_TAGS = 20
MAX_TAG_LENGTH = 100


@dataclass(frozen=True, slots=True)
class Check:
    """How an option's value is checked: ``function(value, name)`` returns the value to use or
    raises an error naming the problem (never called with None, which leaves the option unset);
    ``default`` is what a job gets when neither its task nor the call sets the option."""

    function: Callable[[Any, str], Any] | None = None
    default: Any = None


# -- the checks --------------------------------------------------------------------------------


def check_int(value: object, what: str, low: int, high: int) -> int:
    """An integer (not a bool) between ``low`` and ``high``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidJobError(f"{what} must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidJobError(f"{what} must be between {low} and {high}, got {value}")
    return value


def to_timedelta(value: object, what: str) -> timedelta:
    """Seconds (int/float) or a timedelta, between 0 and :data:`MAX_DURATION`.

    The bound keeps every ``now() + value`` the database computes (run_at, keep_until,
    expires_at) a valid timestamp, and ``timedelta(seconds=...)`` from overflowing."""
    accepted = f"{what} must be between 0 and {_MAX_YEARS} years"
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidJobError(f"{accepted} (must be finite), got {value!r}")
        if value < 0:
            raise InvalidJobError(f"{accepted} (must not be negative), got {value!r:.40}")
        if value > _MAX_SECONDS:
            raise InvalidJobError(f"{accepted} ({_MAX_SECONDS:.0f} seconds), got {value!r:.40}")
        delta = timedelta(seconds=value)
    else:
        raise InvalidJobError(f"{what} must be seconds or a timedelta, got {type(value).__name__}")
    if delta < timedelta(0):
        raise InvalidJobError(f"{accepted} (must not be negative), got {value!r}")
    if delta > MAX_DURATION:
        raise InvalidJobError(f"{accepted} ({MAX_DURATION.days} days), got {value!r}")
    return delta


def check_job_id(value: object) -> int:
    """One job id as an operation takes it (``pgq.cancel``, ``pgq.progress``): an integer, or
    its decimal string (as a URL or a form carries it), within a bigint. Any other value would
    reach the database as a cast error, or find no function to call."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not -MAX_JOB_ID <= value <= MAX_JOB_ID
    ):
        raise InvalidJobError(f"a job id must be an integer (a bigint), got {value!r:.40}")
    return int(value)


def check_job_ids(value: object, what: str) -> tuple[int, ...]:
    """A list of job ids (ints), without repeats, in the order given."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidJobError(f"{what} must be a list of job ids, got {type(value).__name__}")
    ids: dict[int, None] = {}
    for item in value:
        # Ids are bigints: a larger number would reach the database and fail there.
        if not isinstance(item, int) or isinstance(item, bool) or not 1 <= item <= MAX_JOB_ID:
            raise InvalidJobError(
                f"{what} must contain job ids (integers between 1 and {MAX_JOB_ID}), "
                f"got {item!r:.40}"
            )
        ids[int(item)] = None
    return tuple(ids)


def _queue(value: object, _: str) -> str:
    return check_name(value, "queue name")


def _priority(value: object, what: str) -> int:
    return check_int(value, what, *_SMALLINT)


def _max_attempts(value: object, what: str) -> int:
    return check_int(value, what, 1, 1_000_000)


def _positive_duration(value: object, what: str) -> timedelta:
    delta = to_timedelta(value, what)
    if delta <= timedelta(0):
        raise InvalidJobError(f"{what} must be positive, got {value!r}")
    return delta


def _aware(value: object, what: str) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidJobError(f"{what} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidJobError(
            f"{what} must be timezone-aware (naive datetimes are ambiguous); "
            "use datetime.now(timezone.utc) + ... or pass delay="
        )
    return value


def check_key(value: object, what: str) -> str:
    """A key (idempotency or concurrency): a non-empty string of at most 1,000 characters
    without NUL."""
    if not isinstance(value, str) or not value or len(value) > _MAX_KEY_LENGTH or "\x00" in value:
        raise InvalidJobError(
            f"{what} must be a non-empty string of at most {_MAX_KEY_LENGTH} "
            f"characters without NUL, got {value!r:.80}"
        )
    check_unicode(value, what)
    return value


def _final_states(value: object, what: str) -> tuple[str, ...]:
    states = (value,) if isinstance(value, str) else tuple(cast("Iterable[str]", value))
    if not states or set(states) - set(UNIQUE_STATES):
        raise InvalidJobError(
            f"{what} must name final states among {', '.join(UNIQUE_STATES)} "
            f"(waiting and running jobs always hold their key), got {value!r}"
        )
    return states


def check_meta(value: object, what: str = "meta") -> dict[str, Any]:
    """Metadata: a JSON object with string keys, checked as args are (no NaN, NUL or lone
    surrogate), at most :data:`MAX_META_BYTES` of JSON."""
    if not isinstance(value, Mapping):
        raise InvalidJobError(
            f"{what} must be a JSON object (a mapping), got {type(value).__name__}"
        )
    plain = dict(value)
    dumps(plain, limit=MAX_META_BYTES, what=what)
    return plain


def check_tags(value: object, what: str = "tags") -> tuple[str, ...]:
    """Tags: a list of non-empty strings of at most :data:`MAX_TAG_LENGTH` characters, at most
    :data:`MAX_TAGS` of them; repeats are dropped, the order is kept."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidJobError(
            f"{what} must be a list of strings, got {type(value).__name__}"
            + (f" (write [{value!r:.40}] for one tag)" if isinstance(value, str) else "")
        )
    tags: dict[str, None] = {}
    for tag in value:
        if not isinstance(tag, str) or not tag or len(tag) > MAX_TAG_LENGTH or "\x00" in tag:
            raise InvalidJobError(
                f"{what} must be non-empty strings of at most {MAX_TAG_LENGTH} characters "
                f"without NUL, got {tag!r:.80}"
            )
        check_unicode(tag, f"tag {tag!r:.40}")
        tags[tag] = None
    if len(tags) > MAX_TAGS:
        raise InvalidJobError(f"a job may have at most {MAX_TAGS} tags, got {len(tags)}")
    return tuple(tags)


def merge_meta(
    defaults: Mapping[str, Any] | None, given: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """A job's metadata: the task's, with the call's keys added over it (the call wins for a
    key both set); None when neither sets any."""
    if not defaults:
        return dict(given) if given else None
    return {**defaults, **(given or {})}


def merge_tags(
    defaults: Iterable[str] | None, given: Iterable[str] | None
) -> tuple[str, ...] | None:
    """A job's tags: the task's, then the call's, without repeats; None when neither sets
    any."""
    if not defaults:
        return tuple(given) if given else None
    return check_tags((*defaults, *(given or ())))


def _unique_among(value: object, what: str) -> str:
    return check_choice(value, what, UNIQUE_AMONG)


def _on_conflict(value: object, what: str) -> str:
    return check_choice(value, what, ON_CONFLICT)


def _period(value: object, what: str) -> timedelta:
    # Whole seconds: the period's start is part of the key, written the same way by every
    # producer (pgqueue.enqueue_job computes it from the database clock).
    delta = _positive_duration(value, what)
    if delta < timedelta(seconds=1) or delta.microseconds:
        raise InvalidJobError(
            f"{what} must be a whole number of seconds (at least 1), got {value!r}"
        )
    return delta


def _seconds(value: object, what: str) -> float | None:
    # 0 (or a zero timedelta) means no timeout, as None does.
    return to_timedelta(value, what).total_seconds() or None


def _limit(value: object, what: str) -> int | None:
    return check_limit(value, what)


def _rate(value: object, _: str) -> RateLimit:
    return RateLimit.parse(cast("str | float | RateLimit", value))


def _limit_by(value: object, what: str) -> str:
    # An argument name, or a dotted path into a dict argument ("order.customer_id"): argument
    # names are identifiers, so a dot can only mean a path.
    parts = value.split(".") if isinstance(value, str) else []
    if not parts or not all(part.isidentifier() for part in parts):
        raise ConfigurationError(
            f"{what} must name an argument, or a dotted path into a dict argument "
            f"('customer_id', 'order.customer_id'), got {value!r:.80}"
        )
    return cast("str", value)


def _breaker(value: object, _: str) -> CircuitBreaker:
    if not isinstance(value, CircuitBreaker):
        raise ConfigurationError("circuit_breaker must be a pgqueue.CircuitBreaker")
    return value


def _batch_size(value: object, what: str) -> int:
    return check_int(value, what, 1, MAX_BATCH_SIZE)


def _batch_wait(value: object, what: str) -> float:
    return to_timedelta(value, what).total_seconds()


def _events(value: object, _: str) -> tuple[str, ...]:
    events = (value,) if isinstance(value, str) else tuple(cast("Iterable[str]", value))
    return tuple(check_name(event, "event name") for event in events)


# -- the declarations --------------------------------------------------------------------------


class JobBasics(TypedDict, total=False):
    """Where a job waits, in which order, how many attempts: what a task, a cron schedule and
    a call may set. ``None`` leaves an option unset (the task's value, else the default)."""

    queue: Annotated[
        str | None, Check(_queue, default="default"), Flag("Queue (default: {default!r}).")
    ]
    """The queue the job waits in (default ``"default"``)."""
    priority: Annotated[
        int | None, Check(_priority, default=0), Flag("Lower runs first (default {default}).")
    ]
    """Lower runs first, -32768 to 32767 (default 0)."""
    max_attempts: Annotated[
        int | None,
        Check(_max_attempts, default=5),
        Flag("Attempts before dead-lettering (default {default})."),
    ]
    """Attempts before the job is dead-lettered (default 5)."""
    meta: Annotated[
        Mapping[str, Any] | None,
        Check(check_meta),
        Flag("Metadata stored with the job: a JSON object.", kind="json"),
    ]
    """Metadata stored with the job (a JSON object with string keys, at most 8 KB of JSON):
    shown by the views, the CLI and the dashboard, searchable, ``current_job().meta`` in the
    handler. A call's keys are added over its task's (the call wins a key both set)."""
    tags: Annotated[
        Iterable[str] | None,
        Check(check_tags),
        Flag("A tag stored with the job (repeat for several).", "repeat", "TAG", ("--tag",)),
    ]
    """Tags stored with the job (at most 20 non-empty strings of at most 100 characters;
    repeats dropped, order kept): searchable, ``current_job().tags``. A call's tags are added
    to its task's."""


class JobDefaults(JobBasics, total=False):
    """What a task declares for its jobs and a call may override."""

    result_ttl: Annotated[
        float | timedelta | None,
        Check(_positive_duration),
        Flag("Keep the return value this long (e.g. 1h), for pgq.result().", "duration"),
    ]
    """Keep the job's return value this long (seconds or a timedelta; see ``pgq.result()``)."""
    unique_by: Annotated[
        bool | str | Iterable[str] | None,
        Check(check_unique_by),
        Flag(
            "Key the job by its task and this argument (repeat for several).",
            "repeat",
            "ARG",
            switch=("--unique", "Key the job by its task and all its arguments (unique_by=True)."),
        ),
    ]
    """Derive the idempotency key from the task and its arguments: ``True`` (all of them) or
    the names of the ones that count; ``False`` turns a task's ``unique_by`` off for a call."""
    # (No Check default for these two: the job's field defaults to it, so a job that leaves
    # them unset costs no check and no lookup of theirs at enqueue.)
    unique_among: Annotated[
        Literal["live", "pending"] | None,
        Check(_unique_among),
        Flag("The key is held until the job finishes (live) or starts (pending)."),
    ]
    """When a job holds its key: ``"live"`` (default: until it finishes) or ``"pending"``
    (until a worker starts it, so a new job can be enqueued while it runs)."""
    on_conflict: Annotated[
        Literal["keep", "replace", "replace_args"] | None,
        Check(_on_conflict),
        Flag(
            "A pending job with the key: keep it, or replace its args and run time (replace) or "
            "its args (replace_args)."
        ),
    ]
    """Enqueueing a held key again: ``"keep"`` (default: the holder stays as it is),
    ``"replace"`` (a holder not yet running gets this call's args and run_at: debounce),
    ``"replace_args"`` (its args only)."""
    throttle: Annotated[
        float | timedelta | None,
        Check(_period),
        Flag("At most one job per key per period (e.g. 1m).", "duration"),
    ]
    """At most one job per key per period (whole seconds, by the database clock)."""


class JobOptions(JobDefaults, total=False):
    """One call's options: ``pgq.enqueue(...)``, ``task.enqueue(...)``, ``task.options(...)``."""

    run_at: Annotated[
        datetime | None, Check(_aware), Flag("Run at this time (ISO 8601 with a UTC offset).")
    ]
    """When the job may run (a timezone-aware datetime)."""
    delay: Annotated[
        float | timedelta | None, Check(to_timedelta), Flag("Run after e.g. 30s, 5m.", "duration")
    ]
    """Run the job no sooner than this from now (seconds or a timedelta)."""
    idempotency_key: Annotated[
        str | None,
        Check(check_key),
        Flag("Return the live job with this key instead of adding a duplicate."),
    ]
    """At most one live job holds a key: enqueueing it again returns that job's id."""
    concurrency_key: Annotated[
        str | None,
        Check(check_key),
        Flag("Concurrency key (the task's key_limit applies per key)."),
    ]
    """The job's key (a task's ``limit_by`` sets it from an argument): jobs sharing a key run
    at most ``key_limit`` at once (a task option, default 1), start at most
    ``key_rate_limit`` per second, and take turns with other keys in a fair queue."""
    unique_for: Annotated[
        float | timedelta | None,
        Check(_positive_duration),
        Flag("Keep the key this long after the job finished (e.g. 1d).", "duration"),
    ]
    """Keep the idempotency key this long after the job finished in one of
    ``unique_states``."""
    unique_states: Annotated[
        str | Iterable[str] | None,
        Check(_final_states),
        Flag(
            "With --unique-for: a final state that keeps the key (repeat for several; default: "
            f"all of them): {', '.join(UNIQUE_STATES)}.",
            "repeat",
            "STATE",
            ("--unique-state",),
        ),
    ]
    """The final states that keep the key: ``succeeded``, ``dead``, ``cancelled``."""
    wait_if_full: Annotated[
        float | timedelta | None,
        Check(to_timedelta),
        Flag("Wait this long for room in a full queue (max_depth) before failing.", "duration"),
    ]
    """How long to wait for room in a full queue (``max_depth``) before raising
    :class:`~pgqueue.QueueFullError`."""
    depends_on: Annotated[
        Iterable[int] | None,
        Check(check_job_ids),
        Flag(
            "Id of a job that must succeed first (repeat for several); the job waits.",
            "repeat",
            "ID",
            low=1,
            high=MAX_JOB_ID,
        ),
    ]
    """Ids of jobs that must succeed first (the job waits until they have)."""
    caused_by: Annotated[
        int | None,
        Check(lambda v, w: check_int(v, w, 1, MAX_JOB_ID)),
        Flag(
            "Id of the job that led to this one (stored with the job).",
            metavar="ID",
            low=1,
            high=MAX_JOB_ID,
        ),
    ]
    """The id of the job that led to this one (a handler's own job, a failed job's follow-up):
    stored with the job, so ``WHERE caused_by = ...`` finds what a job set off."""


class TaskOptions(JobDefaults, total=False):
    """What ``@pgq.task(...)`` takes besides ``name`` and ``pass_context``."""

    timeout: Annotated[float | timedelta | None, Check(_seconds)]
    """How long one attempt may run (seconds or a timedelta)."""
    backoff: BackoffLike | None
    """The delay before a retry: a policy, or a callable of the attempt number (and the
    exception) returning seconds (default: full-jitter exponential, 1 s base, 1 h cap)."""
    retry_on: type[BaseException] | Iterable[type[BaseException]] | None
    """Exceptions that are retried (default: every ``Exception``)."""
    no_retry_on: type[BaseException] | Iterable[type[BaseException]] | None
    """Exceptions that are never retried (wins over ``retry_on``)."""
    concurrency_limit: Annotated[int | None, Check(_limit)]
    """Jobs of this task running at once, fleet-wide."""
    limit_by: Annotated[str | None, Check(_limit_by)]
    """The argument whose value is each job's key (its ``concurrency_key``), or a dotted path
    into a dict argument (``"order.customer_id"``): ``key_limit``, ``key_rate_limit`` and a
    fair queue go by it."""
    key_limit: Annotated[int | None, Check(_limit)]
    """Running jobs per key, fleet-wide (default 1; with ``limit_by``: no limit)."""
    rate_limit: Annotated[str | float | RateLimit | None, Check(_rate)]
    """Jobs started per second, fleet-wide: ``"20/s"``, ``"100/m"`` or a
    :class:`~pgqueue.RateLimit`."""
    key_rate_limit: Annotated[str | float | RateLimit | None, Check(_rate)]
    """Jobs started per second per key, fleet-wide: a token bucket for each key
    (``"10/s"``)."""
    circuit_breaker: Annotated[CircuitBreaker | None, Check(_breaker)]
    """Stop claiming the task while it keeps failing (a :class:`~pgqueue.CircuitBreaker`)."""
    on: Annotated[str | tuple[str, ...] | list[str] | None, Check(_events)]
    """Events the task subscribes to (see ``pgq.publish()``)."""


class BatchOptions(TypedDict, total=False):
    """What makes a task a batch task: ``@pgq.task(batch_size=100, batch_wait=1.0)`` on a function
    whose one parameter is a list of :class:`~pgqueue.Item` (see the guide's "Batch handlers")."""

    # Required outside Annotated: the other order crashes mypy's django-stubs plugin.
    batch_size: Required[Annotated[int, Check(_batch_size)]]
    """The most jobs one call of the handler gets (1 to 10,000)."""
    batch_wait: Annotated[float | timedelta | None, Check(_batch_wait, default=1.0)]
    """How long the first job of a batch waits for others before the batch runs with what it has
    (seconds or a timedelta; default 1 s; 0 runs what each claim brought at once). Keep it well
    under the worker's lease: the waiting jobs are claimed."""


class BatchTaskOptions(TaskOptions, BatchOptions, total=False):
    """``@pgq.task(...)``'s options for a batch task: the task's and the batch's."""


def _checks(options: type) -> dict[str, Check]:
    hints = get_type_hints(options, include_extras=True)
    return {
        name: next(
            (m for m in getattr(_unrequired(hint), "__metadata__", ()) if isinstance(m, Check)),
            Check(),
        )
        for name, hint in hints.items()
    }


def _unrequired(hint: Any) -> Any:
    """``Annotated[...]`` out of ``Required[Annotated[...]]`` / ``NotRequired[...]``."""
    return get_args(hint)[0] if get_origin(hint) in (Required, NotRequired) else hint


_JOB_CHECKS = _checks(JobOptions)
_TASK_CHECKS = _checks(TaskOptions)
_BATCH_CHECKS = _checks(BatchOptions)
#: The options that make a task a batch task.
BATCH_OPTION_NAMES = frozenset(_BATCH_CHECKS)
#: The keyword arguments of enqueue that are options, not task arguments.
OPTION_NAMES = frozenset(_JOB_CHECKS)
#: The options a task passes on to its jobs as their defaults.
JOB_DEFAULT_NAMES = tuple(_checks(JobDefaults))
#: What a job gets for an option neither its task nor the call sets.
DEFAULTS: Mapping[str, Any] = {
    name: check.default for name, check in _JOB_CHECKS.items() if check.default is not None
}


def _checked(
    options: Mapping[str, Any], checks: Mapping[str, Check], what: str, error: type[Exception]
) -> dict[str, Any]:
    if not options.keys() <= checks.keys():
        unknown = ", ".join(sorted(options.keys() - checks.keys()))
        raise error(f"unknown {what} option(s): {unknown} (known: {', '.join(sorted(checks))})")
    checked = dict(options)
    for name, value in options.items():
        function = checks[name].function
        if value is not None and function is not None:
            checked[name] = function(value, name)
    return checked


def check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validate job option values (not defaults); raise :class:`InvalidJobError` naming the
    problem. ``None`` values stay (they leave an option unset)."""
    if options.get("run_at") is not None and options.get("delay") is not None:
        raise InvalidJobError("pass either run_at or delay, not both")
    return _checked(options, _JOB_CHECKS, "enqueue", InvalidJobError)


def check_task_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``@pgq.task(...)`` options; raise :class:`~pgqueue.ConfigurationError` for an
    unknown one, and what each check raises for a bad value. ``None`` values stay."""
    return _checked(options, _TASK_CHECKS, "task", ConfigurationError)


def check_batch_options(options: Mapping[str, Any]) -> tuple[int, float]:
    """Validate a batch task's ``batch_size`` and ``batch_wait``: (size, wait in seconds)."""
    checked = _checked(options, _BATCH_CHECKS, "batch", ConfigurationError)
    if checked.get("batch_size") is None:
        raise ConfigurationError("a batch task needs batch_size (the most jobs one call gets)")
    wait = checked.get("batch_wait")
    return checked["batch_size"], _BATCH_CHECKS["batch_wait"].default if wait is None else wait
