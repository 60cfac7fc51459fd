"""Tasks: the functions a :class:`~pgqueue.PgQueue` knows how to run, and how to enqueue them.

``@pgq.task(...)`` wraps a function in a :class:`Task`. Calling the task runs the function
directly; ``task.enqueue(...)`` writes a job. Keyword arguments of ``enqueue`` whose names are
options (:class:`~pgqueue.rules.options.JobOptions`: ``queue``, ``priority``, ``run_at``, ``delay``,
``idempotency_key``, ..., and ``conn``) are taken as options; everything else goes to the
task. When the task's own parameters use one of those names, ``task.options(...).enqueue(...)``
passes every keyword to the task.

Typing: ``Task`` is generic in the function's parameters (a ``ParamSpec``) and return type.
``task.options(...).enqueue(...)`` is the enqueue a type checker checks against the function's
own signature; ``task.enqueue(...)`` and ``task.s(...)`` take ``Any``: a ``ParamSpec`` cannot
be combined with extra keyword options (``enqueue``), and ``s`` accepts partial arguments.
Every enqueue of a task returns a ``JobId[R]``, ``R`` the function's return type (a coroutine
for an ``async def``), so ``pgq.result(job_id)`` is typed by it (what the coroutine returns).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from pgqueue.errors import ConfigurationError, InvalidJobError
from pgqueue.rules.dedupe import check_argument_names
from pgqueue.rules.job_specs import JobId, JobSpec, spec_template, with_args
from pgqueue.rules.options import (
    DEFAULTS,
    JOB_DEFAULT_NAMES,
    OPTION_NAMES,
    JobOptions,
    TaskOptions,
    check_key,
    check_options,
    check_task_options,
)
from pgqueue.rules.payload import ArgBinder, check_name, free_parameter, signature_of
from pgqueue.rules.retry import RetryPolicy

if TYPE_CHECKING:
    from typing import Unpack

    from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg
    from pgqueue.rules.app import App
    from pgqueue.rules.flow_control import CircuitBreaker, RateLimit

P = ParamSpec("P")
R = TypeVar("R")

_CALL_OPTIONS = OPTION_NAMES | {"conn"}
# The options of a job description that set none (shared, read-only).
_NO_OPTIONS: Mapping[str, Any] = MappingProxyType({})


class EnqueueOptions(JobOptions, total=False):
    """The keyword arguments of ``task.options(...)``: a call's options
    (:class:`~pgqueue.rules.options.JobOptions`) and the caller's connection."""

    conn: ConnectionArg | AsyncConnectionArg | None


class Task(Generic[P, R]):
    """A registered task. Create with ``@pgq.task(...)``, not directly."""

    def __init__(
        self,
        app: App,
        func: Callable[P, R],
        *,
        name: str | None = None,
        pass_context: bool = False,
        **options: Unpack[TaskOptions],
    ) -> None:
        self.app = app
        self.func = func
        self.name = check_name(name or _default_name(func), "task name")
        checked = check_task_options(options)
        #: the options its jobs get unless a call says otherwise (queue, priority, ...)
        self.defaults: dict[str, Any] = {
            name: DEFAULTS.get(name) if checked.get(name) is None else checked[name]
            for name in JOB_DEFAULT_NAMES
        }
        #: seconds one attempt may run (None: no limit)
        self.timeout: float | None = checked.get("timeout")
        self.retry_policy = RetryPolicy.build(
            checked.get("retry_on"), checked.get("no_retry_on"), checked.get("backoff")
        )
        self.backoff = self.retry_policy.backoff
        # Flow control declared in code; workers write it to pgqueue.task_limits at start-up.
        self.concurrency_limit: int | None = checked.get("concurrency_limit")
        self.key_limit: int | None = checked.get("key_limit")
        self.rate_limit: RateLimit | None = checked.get("rate_limit")
        self.key_rate_limit: RateLimit | None = checked.get("key_rate_limit")
        self.circuit_breaker: CircuitBreaker | None = checked.get("circuit_breaker")
        self.events: tuple[str, ...] = checked.get("on") or ()
        self.pass_context = pass_context
        self.is_async = inspect.iscoroutinefunction(func)
        self.signature = signature_of(func, skip_first=pass_context)
        self.binder = ArgBinder(self.signature, self.name, func)
        try:
            check_unique_by_names(self, self.defaults.get("unique_by"))
        except InvalidJobError as exc:
            raise ConfigurationError(str(exc)) from None
        #: the argument (or path into one) whose value is each job's key
        self.limit_by: JobKey | None = (
            JobKey(checked["limit_by"], self.signature, self.name)
            if checked.get("limit_by") is not None
            else None
        )
        self.__doc__ = func.__doc__
        self.__name__ = getattr(func, "__name__", self.name)
        # The validated job of a call without options, made on first use: a single enqueue
        # would otherwise validate the task's name and defaults again at every call.
        self._plain_template: JobSpec | None = None

    @property
    def declares_limits(self) -> bool:
        """Whether the task declares a concurrency, per-key or rate limit (``limit_by`` counts:
        it lifts the default limit of one running job per key)."""
        limits = (self.concurrency_limit, self.key_limit, self.rate_limit, self.key_rate_limit)
        return self.limit_by is not None or any(v is not None for v in limits)

    def retry_delay(self, attempt: int, error: BaseException | None = None) -> float:
        """Seconds before the next attempt after ``attempt`` attempts (the task's backoff)."""
        return self.retry_policy.delay(attempt, error)

    @property
    def queue(self) -> str:
        """The queue the task's jobs go to unless a call says otherwise."""
        return str(self.defaults["queue"])

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function here and now, without a queue (handy in tests and scripts)."""
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue!r}>"

    def _template(self, options: Mapping[str, Any]) -> JobSpec:
        """The validated job of a call with these options, before its arguments (a call
        without options: validated once per task)."""
        if not options and self._plain_template is not None:
            return self._plain_template
        template = spec_template(self.name, options, defaults=self.defaults)
        check_unique_by_names(self, template.unique_by)
        if not options:
            self._plain_template = template
        return template

    def options(self, **options: Unpack[EnqueueOptions]) -> TaskCall[P, R]:
        """The same task with per-call options fixed; its ``enqueue`` passes every keyword
        argument to the task (for tasks whose parameter names clash with option names), and a
        type checker checks them against the task's signature."""
        conn = options.pop("conn", None)
        return TaskCall(self, check_options(options), conn)

    def s(self, *args: Any, **kwargs: Any) -> JobCall:
        """A job description (task + arguments + options) for bulk enqueue and workflows.

        Required arguments may be left out: in a workflow, the first free parameter receives
        the parent's result; anywhere else, a missing argument is an error at enqueue.
        """
        if _CALL_OPTIONS.isdisjoint(kwargs):
            # No options: the common case of bulk enqueue, without building a TaskCall.
            return JobCall(self, self.binder.pack(args, kwargs, partial=True), _NO_OPTIONS)
        options, task_kwargs = _split(kwargs)
        if "conn" in options:
            raise InvalidJobError(
                "conn is not an option of a job description; pass it to enqueue_many(..., conn=...)"
            )
        return self.options(**options).s(*args, **task_kwargs)

    def enqueue(self, *args: Any, **kwargs: Any) -> JobId[R]:
        """Enqueue a job and return its id (see the module docstring for the options)."""
        options, task_kwargs = _split(kwargs)
        if not options:  # the common call: no TaskCall, no options to check
            return self.app.enqueue_spec(self.s(*args, **task_kwargs).spec())
        return self.options(**options).enqueue(*args, **task_kwargs)

    async def enqueue_async(self, *args: Any, **kwargs: Any) -> JobId[R]:
        """The async twin of :meth:`enqueue`; ``conn`` is a ``psycopg.AsyncConnection``."""
        options, task_kwargs = _split(kwargs)
        if not options:
            return await self.app.enqueue_spec_async(self.s(*args, **task_kwargs).spec())
        return await self.options(**options).enqueue_async(*args, **task_kwargs)


@dataclass(frozen=True, slots=True)
class TaskCall(Generic[P, R]):
    """A task with per-call options fixed (``task.options(...)``); ``enqueue`` takes exactly
    the task's own arguments, typed by its signature."""

    task: Task[P, R]
    options: Mapping[str, Any]
    conn: ConnectionArg | AsyncConnectionArg | None = None

    def s(self, *args: Any, **kwargs: Any) -> JobCall:
        # Any, not P: a job description may leave arguments for its workflow parents to fill.
        return JobCall(self.task, self.task.binder.pack(args, kwargs, partial=True), self.options)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobId[R]:
        call = self.s(*args, **kwargs)
        return self.task.app.enqueue_spec(call.spec(), conn=self.conn)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> JobId[R]:
        call = self.s(*args, **kwargs)
        return await self.task.app.enqueue_spec_async(call.spec(), conn=self.conn)


@dataclass(frozen=True, slots=True)
class JobCall:
    """A task, its bound arguments and options: one job not yet written."""

    task: Task[..., Any]
    args: Mapping[str, Any]
    options: Mapping[str, Any] = field(default_factory=dict)

    def spec(
        self, *, receives: bool = False, templates: dict[Any, JobSpec] | None = None
    ) -> JobSpec:
        """The validated job; ``receives``: the first free parameter will be filled in with
        the parents' results (a workflow step), so it may be missing now. ``templates`` caches
        the validated task and options across the jobs of one bulk enqueue."""
        self.task.binder.check_complete(self.args, given=self.result_arg() if receives else None)
        key = _template_key(self.task, self.options) if templates is not None else None
        template = templates.get(key) if templates is not None and key is not None else None
        if template is None:
            template = self.task._template(self.options)
            if templates is not None and key is not None:
                templates[key] = template
        spec = with_args(template, self.args, self.task.app.max_payload_bytes)
        if self.task.limit_by is not None and spec.concurrency_key is None:
            spec.concurrency_key = self.task.limit_by.of(self.args)
        return spec

    def result_arg(self) -> str | None:
        """The parameter that receives parents' results in a workflow (the first one not
        bound here), or None: this step ignores them."""
        return free_parameter(self.task.signature, self.args)

    def enqueue(self, conn: ConnectionArg | None = None) -> JobId:
        """Write this job (in the caller's transaction with ``conn``) and return its id."""
        return self.task.app.enqueue_spec(self.spec(), conn=conn)

    async def enqueue_async(self, conn: AsyncConnectionArg | None = None) -> JobId:
        """The async twin of :meth:`enqueue`."""
        return await self.task.app.enqueue_spec_async(self.spec(), conn=conn)


def check_unique_by_names(task: Task[..., Any], unique_by: object) -> None:
    """Raise :class:`InvalidJobError` when ``unique_by`` names an argument the task does not
    take (a typo would otherwise leave it out of every key)."""
    if isinstance(unique_by, tuple) and not any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in task.signature.parameters.values()
    ):
        check_argument_names(unique_by, task.signature.parameters, task.name)


class JobKey:
    """A task's ``limit_by``: which argument (or path into a dict argument) holds each job's
    key. A value of None, or one missing (no argument, no default, no such path), gives the
    job no key; a string or an integer is the key; anything else is an error."""

    def __init__(self, path: str, signature: inspect.Signature, task: str) -> None:
        self.path = path
        self.task = task
        self.name, *self.parts = path.split(".")
        parameters = signature.parameters
        parameter = parameters.get(self.name)
        #: the ``**kwargs`` parameter, where a name that is no parameter of its own is stored
        self.var_keyword = next(
            (p.name for p in parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD), None
        )
        if parameter is None and self.var_keyword is None:
            raise ConfigurationError(
                f"limit_by={path!r} of task {task!r}: the task has no argument {self.name!r}"
            )
        #: the argument's default, when a call leaves it out
        self.default: Any = None
        if parameter is not None and parameter.default is not inspect.Parameter.empty:
            self.default = parameter.default

    def of(self, args: Mapping[str, Any]) -> str | None:
        """The key of the job with these arguments."""
        if self.name in args:
            value = args[self.name]
        else:
            extra = args.get(self.var_keyword) if self.var_keyword is not None else None
            value = extra.get(self.name) if isinstance(extra, Mapping) else self.default
        for part in self.parts:
            if value is None:
                return None
            if not isinstance(value, Mapping):
                raise InvalidJobError(
                    f"limit_by={self.path!r} of task {self.task!r}: the value before {part!r} "
                    f"is {type(value).__name__}, not an object"
                )
            value = value.get(part)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise InvalidJobError(
                f"limit_by={self.path!r} of task {self.task!r}: a key must be a string or an "
                f"integer, got {type(value).__name__}"
            )
        return check_key(str(value), f"the key of limit_by={self.path!r}")


def _template_key(task: Task[..., Any], options: Mapping[str, Any]) -> Any:
    """What identifies a job template: the task and its call options (None: not hashable, so
    not cached)."""
    if not options:
        return (id(task), ())
    try:
        key = (id(task), tuple(sorted(options.items())))
        hash(key)
    except TypeError:
        return None
    return key


def _split(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    options = {name: kwargs.pop(name) for name in list(kwargs) if name in _CALL_OPTIONS}
    return options, kwargs


def _default_name(func: Callable[..., Any]) -> str:
    module = getattr(func, "__module__", None) or "tasks"
    qualname = getattr(func, "__qualname__", repr(func))
    if module == "__main__":
        # A worker imports the module by its name, so it would register "tasks.add", never
        # "__main__.add": the jobs would wait for ever and pgq.result() would never return.
        raise ConfigurationError(
            f"task {qualname!r} is defined in __main__ (a script run as `python file.py` or "
            f"`python -m module`), and workers could never find a task named "
            f"'__main__.{qualname}': move it into a module that both this script and "
            f'`pgq work` import, or give it a name: @pgq.task(name="myapp.{qualname}")'
        )
    return f"{module}.{qualname}"
