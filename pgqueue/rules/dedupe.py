"""Deduplication: the modes a keyed job can have, and the key ``unique_by`` derives.

A job with an idempotency key (given, or derived from its task and arguments by ``unique_by``)
is deduplicated against the job that holds the key; the modes say when a job holds it
(``unique_among``), what a second enqueue does to a holder that has not started
(``on_conflict``) and whether the key is per period (``throttle``). The rules themselves live
in ``pgqueue.enqueue_job`` (SQL), so every producer (Python, psql, a trigger) follows them.

The derived key is ``<task>:<sha256 of the chosen arguments as canonical JSON>``: sorted object
keys, no whitespace, ASCII-only escapes, Python's shortest float repr. It depends only on the
values, so every process and Python version computes the same key for the same call. It covers
the arguments as stored (the ones the call passed, by name): a parameter left to its default is
not part of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, cast

from pgqueue.errors import InvalidJobError
from pgqueue.rules.codec import to_plain

#: When a job holds its key: from enqueue until it finishes, or until a worker first claims it.
UNIQUE_AMONG = ("live", "pending")
#: What enqueueing a key again does to a holder that has not started.
ON_CONFLICT = ("keep", "replace", "replace_args")

# Values JSON has no type for count as they are stored (pgqueue.rules.codec: a datetime as its ISO
# string, a set sorted), so the key is the same whichever process computes it.
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False, default=to_plain
)


def derived_key(task: str, args: Mapping[str, Any], names: tuple[str, ...] | None) -> str:
    """The idempotency key of ``task`` called with ``args``: over every argument (``names`` is
    None) or over the named ones (a name the call did not pass is left out)."""
    import hashlib  # for unique_by only: not on a worker's start path

    chosen = args if names is None else {name: args[name] for name in names if name in args}
    digest = hashlib.sha256(_CANONICAL.encode(chosen).encode("ascii")).hexdigest()
    return f"{task}:{digest}"


def check_unique_by(value: object, what: str) -> bool | tuple[str, ...]:
    """``True`` (task and every argument), ``False`` (off), or argument names (a string is one
    name), without repeats."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        names: tuple[object, ...] = (value,)
    elif isinstance(value, Iterable) and not isinstance(value, bytes | Mapping):
        names = tuple(cast("Iterable[object]", value))
    else:
        raise InvalidJobError(
            f"{what} must be True (the task and all its arguments), False, or argument names, "
            f"got {type(value).__name__}"
        )
    if not names:
        raise InvalidJobError(f"{what} needs at least one argument name (True: all of them)")
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidJobError(f"{what} must name arguments (strings), got {name!r:.80}")
    return tuple(dict.fromkeys(cast("tuple[str, ...]", names)))


def check_argument_names(names: tuple[str, ...], parameters: Iterable[str], task: str) -> None:
    """Each ``unique_by`` name is a parameter of the task (when its signature is known)."""
    known = set(parameters)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise InvalidJobError(
            f"unique_by names {', '.join(map(repr, unknown))}, which task {task!r} does not take "
            f"(its parameters: {', '.join(sorted(known)) or 'none'})"
        )


def check_choice(value: object, what: str, choices: tuple[str, ...]) -> str:
    """One of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        *first, last = map(repr, choices)
        raise InvalidJobError(f"{what} must be {', '.join(first)} or {last}, got {value!r:.80}")
    return value
