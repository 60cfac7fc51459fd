"""Batch tasks: one handler call for many jobs, each job keeping its own outcome.

``@pgq.task(batch_size=100, batch_wait=1.0)`` on a function whose one parameter is a list of
:class:`Item` makes a :class:`BatchTask`. The worker gathers claimed jobs of the task until
``batch_size`` are there or ``batch_wait`` seconds passed since the first one, and calls the
function once with all of them. Each job is still a job of its own: its own attempts, retries,
backoff, dead letter and result.

How one job's arguments are declared: the ``X`` of ``list[Item[X]]`` (:class:`ArgsModel`):

* a ``TypedDict``: the job's arguments are its keys; ``item.args`` is the dict;
* a class (a dataclass, a ``NamedTuple``, a pydantic model: anything called with its fields as
  keywords): its constructor's parameters; ``item.args`` is an instance built in the worker;
* ``dict[str, Any]`` (or no annotation): any keyword arguments; ``item.args`` is the dict.

Enqueue is a normal enqueue with those arguments: ``task.enqueue(user=7, amount=2.5)``,
``task.s(...)``. The typed form, ``task.options(...).enqueue(X(...))``, takes one value of the
model (a ``TypedDict`` literal, a dataclass instance): a type checker checks it.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import typing
from collections.abc import Callable, Coroutine, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from pgqueue.errors import ConfigurationError, InvalidJobError
from pgqueue.handler.job_context import ClaimedJob, JobContext
from pgqueue.rules.options import BATCH_OPTION_NAMES, check_batch_options
from pgqueue.rules.payload import ArgBinder, UndecodableJson
from pgqueue.rules.tasks import Task

if TYPE_CHECKING:
    from typing import Unpack

    from pgqueue.rules.app import App
    from pgqueue.rules.options import BatchTaskOptions, TaskOptions

A = TypeVar("A")
R = TypeVar("R")

# The default of a TypedDict key that is not required (a parameter that may be left out).
_NOT_REQUIRED = object()
# What a list of items may be annotated as (the worker passes a list).
_SEQUENCES = (
    list,
    collections.abc.Sequence,
    collections.abc.Iterable,
    collections.abc.Collection,
)


class Item(Generic[A]):
    """One job of a batch, as a batch handler gets it: the job's id, attempt and ``args`` (its
    arguments as the task declares them: ``Item[Row]``).

    Mark a job that failed with :meth:`fail`; the jobs not marked succeed when the handler
    returns. An exception the handler raises fails every job not marked (each one failed
    attempt)."""

    __slots__ = ("_ctx", "args", "error")

    def __init__(self, ctx: JobContext, args: A) -> None:
        self._ctx = ctx
        #: The job's arguments.
        self.args: A = args
        #: What :meth:`fail` marked the job with (None: it succeeds).
        self.error: Exception | None = None

    def __repr__(self) -> str:
        return f"<Item id={self.id} attempt={self.attempt} args={self.args!r}>"

    @property
    def id(self) -> int:
        """The job's id."""
        return self._ctx.id

    @property
    def attempt(self) -> int:
        """1 for the job's first attempt."""
        return self._ctx.attempt

    @property
    def max_attempts(self) -> int:
        """Attempts the job may have before it is dead-lettered."""
        return self._ctx.max_attempts

    @property
    def task(self) -> str:
        """The task's name."""
        return self._ctx.task

    @property
    def queue(self) -> str:
        """The queue the job was claimed from."""
        return self._ctx.queue

    @property
    def run_at(self) -> datetime:
        """When the job was due."""
        return self._ctx.run_at

    @property
    def created_at(self) -> datetime:
        """When the job was enqueued."""
        return self._ctx.job.created_at

    @property
    def cancelled(self) -> bool:
        """True once this job should not be worked on any more: an operator cancelled it, its
        lease was lost, or the whole batch is stopping (its timeout, the worker's shutdown).
        A cancelled job's outcome is written as cancelled whatever the handler does with it."""
        return self._ctx.cancelled

    @property
    def cancel_reason(self) -> str | None:
        """Why :attr:`cancelled` turned true: ``"cancelled"``, ``"lease lost"``, ``"timeout"``,
        ``"shutdown"``, or None."""
        return self._ctx.cancel_reason

    def fail(self, error: Exception) -> None:
        """Mark this job failed with ``error``, as if a one-job handler had raised it:
        :class:`~pgqueue.Retry` runs it again later without burning the attempt,
        :class:`~pgqueue.Fail` dead-letters it now, any other exception is a failed attempt
        (retried with the task's backoff while attempts remain)."""
        if not isinstance(error, Exception):
            raise TypeError(f"Item.fail takes an exception, got {type(error).__name__}")
        self.error = error


class ArgsModel:
    """A batch task's per-job arguments: how they are declared (the ``X`` of
    ``list[Item[X]]``), checked and stored at enqueue, and handed back to the handler."""

    def __init__(self, func: Callable[..., Any], task: str) -> None:
        self.task = task
        #: "mapping" (any keywords, a dict), "typeddict" (its keys, a dict) or "class".
        self.kind, self.model = _model_of(func, task)
        self.signature = _signature_of(self.kind, self.model, task)
        # The model's annotations type its fields (pgqueue.rules.codec), as a handler's do its own.
        self.binder = ArgBinder(
            self.signature, task, None if self.kind == "mapping" else self.model
        )

    def one_value(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> Mapping[str, Any] | None:
        """The fields of ``args`` when they are one value of the model (a mapping, an instance
        of the class), else None (the arguments are the fields themselves)."""
        if len(args) != 1 or kwargs:
            return None
        value = args[0]
        if self.kind != "class":
            return value if isinstance(value, Mapping) else None
        return _fields_of(value, self.task) if isinstance(value, self.model) else None

    def value(self, stored: Any) -> Any:
        """The model's value for a job's stored arguments (raises InvalidJobError when they
        can never fit: a job written by hand, or a model that changed)."""
        if self.kind == "mapping":
            if isinstance(stored, UndecodableJson):
                raise InvalidJobError(
                    f"task {self.task!r}: stored args cannot be decoded: {stored.reason}"
                )
            if not isinstance(stored, dict):
                raise InvalidJobError(f"task {self.task!r}: stored args must be a JSON object")
            return stored
        args, kwargs = self.binder.bind(stored)
        if self.kind == "typeddict":
            return kwargs if type(kwargs) is dict else dict(kwargs)
        try:
            return self.model(*args, **kwargs)
        except Exception as exc:
            raise InvalidJobError(
                f"task {self.task!r}: stored args do not make a {self.model.__name__}: "
                f"{type(exc).__name__}: {exc}"
            ) from None


class ItemBinder(ArgBinder):
    """A batch task's binder: enqueue checks and packs one job's arguments against the
    task's :class:`ArgsModel` (not against the handler's own parameter, the list of items)."""

    def __init__(self, model: ArgsModel) -> None:
        super().__init__(model.signature, model.task, model.binder.annotated)
        self.model = model

    def pack(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, partial: bool = False
    ) -> dict[str, Any]:
        value = self.model.one_value(args, kwargs)
        if value is not None:
            args, kwargs = (), value
        if self.model.kind != "mapping":
            return super().pack(args, kwargs, partial=partial)
        if args:
            raise InvalidJobError(
                f"task {self.name!r} takes a job's arguments as keywords or one mapping, "
                f"got {len(args)} positional argument(s)"
            )
        return dict(kwargs)


class BatchTask(Task[[A], R]):
    """A task whose handler takes many jobs at once (``@pgq.task(batch_size=...)``): see the
    module's docstring. It enqueues like any task, with one job's arguments."""

    def __init__(
        self,
        app: App,
        func: Callable[[list[Item[A]]], R],
        *,
        name: str | None = None,
        pass_context: bool = False,
        **options: Unpack[BatchTaskOptions],
    ) -> None:
        if pass_context:
            raise ConfigurationError(
                "a batch task takes no JobContext (pass_context): each Item carries its job's "
                "id, attempt and cancelled"
            )
        batch = {key: value for key, value in options.items() if key in BATCH_OPTION_NAMES}
        size, wait = check_batch_options(batch)
        task_options = {k: v for k, v in options.items() if k not in BATCH_OPTION_NAMES}
        super().__init__(
            app, cast("Callable[[A], R]", func), name=name, **cast("TaskOptions", task_options)
        )
        #: The most jobs one call of the handler gets.
        self.batch_size: int = size
        #: Seconds the first job of a batch waits for others.
        self.batch_wait: float = wait
        self.model = ArgsModel(func, self.name)
        self.signature = self.model.signature
        self.binder = ItemBinder(self.model)

    def __repr__(self) -> str:
        return f"<BatchTask {self.name} queue={self.queue!r} batch_size={self.batch_size}>"

    def __call__(self, args: A, /) -> R:
        """Run the handler here and now on a batch of one job (id 0, attempt 1), without a
        queue (handy in tests): returns what the handler returns, and raises what it marked
        the job failed with."""
        now = datetime.now(UTC)
        job = ClaimedJob(
            0, self.queue, self.name, {}, 1, self.defaults["max_attempts"], 0, 0, now, now
        )
        item: Item[A] = Item(JobContext(job, "local"), args)
        value = cast("Callable[[list[Item[A]]], R]", self.func)([item])
        if inspect.iscoroutine(value):
            return cast("R", _raising(value, item))
        if item.error is not None:
            raise item.error
        return value


async def _raising(value: Coroutine[Any, Any, Any], item: Item[Any]) -> Any:
    result = await value
    if item.error is not None:
        raise item.error
    return result


# -- reading the model from the handler ---------------------------------------------------------


def _model_of(func: Callable[..., Any], task: str) -> tuple[str, Any]:
    params = list(inspect.signature(func).parameters.values())
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if len(params) != 1 or params[0].kind not in kinds:
        raise ConfigurationError(
            f"batch task {task!r}: the function takes one parameter, the list of jobs "
            "(items: list[Item[Args]]), and no other"
        )
    try:
        hint = typing.get_type_hints(func).get(params[0].name)
    except Exception as exc:  # a forward reference that does not resolve, a typo
        raise ConfigurationError(
            f"batch task {task!r}: cannot read its parameter's annotation ({exc}); declare "
            "the arguments' type at module level"
        ) from None
    if hint is None or hint is typing.Any:
        return "mapping", dict
    container, inner = typing.get_origin(hint), typing.get_args(hint)
    if hint in _SEQUENCES or (container in _SEQUENCES and inner and inner[0] is Item):
        return "mapping", dict  # list, or list[Item]: arguments not declared
    if container not in _SEQUENCES or not inner or typing.get_origin(inner[0]) is not Item:
        raise ConfigurationError(
            f"batch task {task!r}: its parameter must be annotated list[Item[Args]] (Args: a "
            f"TypedDict, a dataclass or dict[str, Any]), got {hint!r}"
        )
    model = typing.get_args(inner[0])[0]
    if (
        model is typing.Any
        or model in (dict, Mapping)
        or typing.get_origin(model)
        in (
            dict,
            Mapping,
            collections.abc.Mapping,
        )
    ):
        return "mapping", dict
    if typing.is_typeddict(model):
        return "typeddict", model
    if isinstance(model, type):
        return "class", model
    raise ConfigurationError(
        f"batch task {task!r}: Item[{model!r}]: a job's arguments are declared by a TypedDict, "
        "a class (a dataclass, a NamedTuple, a pydantic model) or dict[str, Any]"
    )


def _signature_of(kind: str, model: Any, task: str) -> inspect.Signature:
    try:
        if kind == "mapping":
            return inspect.Signature([inspect.Parameter("fields", inspect.Parameter.VAR_KEYWORD)])
        if kind == "typeddict":
            return inspect.Signature(
                [
                    inspect.Parameter(
                        key,
                        inspect.Parameter.KEYWORD_ONLY,
                        default=inspect.Parameter.empty if required else _NOT_REQUIRED,
                    )
                    for key, required in _typeddict_keys(model).items()
                ]
            )
        return inspect.signature(model)
    except (TypeError, ValueError, NameError) as exc:
        raise ConfigurationError(
            f"batch task {task!r}: cannot read the fields of {model!r} ({exc}); keys must be "
            "names a function parameter could have"
        ) from None


def _typeddict_keys(model: Any) -> dict[str, bool]:
    """A TypedDict's keys and whether each is required. ``Required`` / ``NotRequired`` are
    read from the evaluated annotations too: under ``from __future__ import annotations`` the
    class's own ``__required_keys__`` cannot see them (Python before 3.14)."""
    keys = {key: key in model.__required_keys__ for key in typing.get_type_hints(model)}
    for key, annotation in typing.get_type_hints(model, include_extras=True).items():
        hint = annotation
        while typing.get_origin(hint) is typing.Annotated:
            hint = typing.get_args(hint)[0]
        if typing.get_origin(hint) is typing.Required:
            keys[key] = True
        elif typing.get_origin(hint) is typing.NotRequired:
            keys[key] = False
    return keys


def _fields_of(value: Any, task: str) -> dict[str, Any]:
    """An instance of a class model as the mapping that is stored (its fields, one level)."""
    if dataclasses.is_dataclass(value):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
    as_dict = getattr(value, "_asdict", None)  # NamedTuple
    if callable(as_dict):
        return dict(as_dict())
    dump = getattr(value, "model_dump", None)  # pydantic
    if callable(dump):
        return dict(dump(mode="json"))
    raise InvalidJobError(
        f"task {task!r}: cannot take the fields of a {type(value).__name__}; pass them as "
        "keyword arguments"
    )
