"""Task names and arguments checked where they are written: an enqueue of a misspelt task name
raises :class:`~pgqueue.UnknownTaskError` at once, instead of parking a job that no worker will
ever claim.

A name is known when a :class:`~pgqueue.PgQueue` of this process registered it (no query at
all), or when a worker declared it (``pgqueue.declared_tasks``, written at every worker's
start-up). Declared names are cached per client and read again only on a miss, on a pooled
connection of the client's own: never in the caller's transaction (``conn=``), where a
statement of pgqueue's could fail it, and at most once a second. So the check costs nothing per
enqueue of a known name, and at most a query a second for names nobody knows (the error path).

Where nothing can be checked against (no worker declared any task in this database, and this
client registered none) names are accepted: that is a database whose workers have not started
since pgqueue was upgraded to the version that declares them (a rolling deploy: producers start
before the workers they feed), and refusing every name there would stop every producer.

What is not checked: SQL's ``pgqueue.enqueue(...)`` (it takes any name, as before), and an
enqueue that opts out (``allow_unknown=True``, or ``PgQueue(check_task_names=False)``): a job
for a task whose workers are not deployed yet.
"""

from __future__ import annotations

import difflib
import inspect
import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pgqueue.db.plan import Plan, fetch_values
from pgqueue.errors import InvalidJobError, UnknownTaskError
from pgqueue.rules.log_actions import Action, fields

if TYPE_CHECKING:
    from pgqueue.rules.tasks import Task

log = logging.getLogger("pgqueue.client")

# Every task name a PgQueue of this process registered: a Task object passed to another
# client's enqueue (or built into a bulk enqueue or a workflow) is code this process imported,
# so its name needs no query either.
_REGISTERED_IN_PROCESS: set[str] = set()

#: Declared names are read again on a miss at most this often (seconds): a name a worker
#: declared is accepted within that long, and a flood of unknown names costs a query a second.
REFRESH_EVERY = 1.0

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def registered_in_process(name: str) -> None:
    """Remember that a client of this process registered the task ``name``."""
    _REGISTERED_IN_PROCESS.add(name)


class TaskNames:
    """The names one client accepts: registered in this process, or declared by a worker (read
    from the database on a miss, and kept)."""

    def __init__(self, registered: Mapping[str, Task[..., Any]], *, check: bool = True) -> None:
        self.registered = registered
        self.check = check
        self.declared: frozenset[str] = frozenset()
        self.read_at: float | None = None  # when the declared names were read (monotonic)
        #: False once the declared names proved unreadable (a producer role granted before
        #: the table existed): names are not checked then, as before the check existed.
        self.readable = True

    def missing(self, names: Iterable[str]) -> list[str]:
        """The names not known without a query (set lookups only: the hot path)."""
        if not self.check or not self.readable:
            return []
        unknown = [
            name
            for name in names
            if name not in self.registered
            and name not in _REGISTERED_IN_PROCESS
            and name not in self.declared
        ]
        if unknown and self.read_at is not None and not self.declared and not self.registered:
            return []  # nothing to check against (see the module docstring)
        return unknown

    def stale(self) -> bool:
        """The declared names may be read again (see :data:`REFRESH_EVERY`)."""
        return self.read_at is None or time.monotonic() - self.read_at >= REFRESH_EVERY

    def refresh(self) -> Plan[None]:
        """Read the names workers declared."""
        names = yield from fetch_values("declared_task_names")
        self.declared = frozenset(names)
        self.read_at = time.monotonic()

    def unreadable(self, exc: BaseException) -> None:
        """The declared names cannot be read (no SELECT on them): stop checking, say so once."""
        self.readable = False
        log.warning(
            "task names are not checked at enqueue: this role cannot read "
            "pgqueue.declared_tasks (%s); run `pgq roles` again to grant it",
            " ".join(str(exc).split()),
            extra=fields(Action.TASK_NAMES_UNCHECKED),
        )

    def raise_unknown(self, names: Iterable[str]) -> None:
        """Raise :class:`UnknownTaskError` for the first name still unknown after a refresh."""
        for name in self.missing(names):
            known = sorted({*self.registered, *_REGISTERED_IN_PROCESS, *self.declared})
            close = tuple(difflib.get_close_matches(name, known, n=3, cutoff=0.6))
            raise UnknownTaskError(unknown_task(name, close), task=name, close=close)


def unknown_task(name: str, close: tuple[str, ...], opt_out: str = "allow_unknown=True") -> str:
    """The message of :class:`UnknownTaskError`; ``opt_out`` as its caller writes it (the CLI:
    ``--allow-unknown``)."""
    hint = f"; did you mean {_either(list(close))}?" if close else ""
    return (
        f"no task named {name!r}: no worker has declared it and this process did not "
        f"register it{hint} (for a task whose workers deploy later: {opt_out})"
    )


def check_arguments(task: Task[..., Any], args: Mapping[str, Any]) -> None:
    """An args object for ``task`` (an enqueue by name) names exactly its parameters: raise
    :class:`InvalidJobError` naming the unexpected and the missing ones."""
    signature = task.signature
    accepted = _ACCEPTED.get(id(signature))
    if accepted is None or accepted[0] is not signature:
        accepted = _accepted(signature)
    _, names_taken, required_names = accepted
    if (names_taken is None or names_taken.issuperset(args)) and args.keys() >= required_names:
        return  # the common call: two set operations, no Python code
    params = signature.parameters.values()
    any_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    names = [p.name for p in params if p.kind in _NAMED]
    required = [p.name for p in params if p.kind in _NAMED and p.default is p.empty]
    unexpected = [] if any_keyword else [key for key in args if key not in names]
    missing = [name for name in required if name not in args]
    if not unexpected and not missing:
        return
    problems = []
    if unexpected:
        problems.append(f"unexpected {_names(unexpected)}")
        close = [
            match
            for key in unexpected
            for match in difflib.get_close_matches(key, names, n=1, cutoff=0.6)
        ]
        if close:
            problems[-1] += f" (did you mean {_either(close)}?)"
    if missing:
        problems.append(f"missing {_names(missing)}")
    takes = ", ".join(names) if names else "no arguments"
    raise InvalidJobError(
        f"args do not match task {task.name!r}: {'; '.join(problems)}; it takes {takes}"
    )


# Per signature (by id, the signature kept so that its id is not reused): the names an args
# object may hold (None: any, the task takes ``**kwargs``) and those it must hold.
_ACCEPTED: dict[int, tuple[inspect.Signature, frozenset[str] | None, frozenset[str]]] = {}


def _accepted(
    signature: inspect.Signature,
) -> tuple[inspect.Signature, frozenset[str] | None, frozenset[str]]:
    params = signature.parameters.values()
    any_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    names = frozenset(p.name for p in params if p.kind in _NAMED)
    required = frozenset(p.name for p in params if p.kind in _NAMED and p.default is p.empty)
    if len(_ACCEPTED) >= 1024:  # (tasks made per call must not grow it without bound)
        _ACCEPTED.clear()
    _ACCEPTED[id(signature)] = accepted = (signature, None if any_keyword else names, required)
    return accepted


def _names(names: list[str]) -> str:
    return ", ".join(repr(name) for name in names)


def _either(names: list[str]) -> str:
    quoted = [repr(name) for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
