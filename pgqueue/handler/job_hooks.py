"""Code that runs around every sync handler call, on the thread that runs it: a handler thread
of ``pool="thread"``, or the process-pool child. What a framework keeps per thread is set up and
torn down there, where the job runs (not on the worker's event loop, where observers run):
``pgqueue.contrib.django`` closes Django's broken or expired connections before and after each
job, as Django itself does around each request.

A hook is a callable returning a context manager, entered before the handler is called and
exited after it returns or raises (the exception passes through). A hook that raises fails the
attempt as the handler would. Async handlers run on the event loop and are not wrapped. Hooks
are process-wide: add them at import time of the app (a process-pool child imports the app,
and so adds its own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack
from typing import Any

__all__ = ["JobHook", "add_job_hook", "job_hooks", "remove_job_hook"]

#: What :func:`add_job_hook` takes: a callable returning a context manager.
JobHook = Callable[[], AbstractContextManager[object]]


class _Registry:
    # A tuple replaced on change: a handler thread reads it without a lock.
    hooks: tuple[JobHook, ...] = ()


_registry = _Registry()


def add_job_hook(hook: JobHook) -> None:
    """Run ``hook()`` as a context manager around every sync handler call of this process's
    workers (added once however often it is added)."""
    if hook not in _registry.hooks:
        _registry.hooks = (*_registry.hooks, hook)


def remove_job_hook(hook: JobHook) -> None:
    """Stop running ``hook`` (nothing if it was not added)."""
    _registry.hooks = tuple(h for h in _registry.hooks if h != hook)


def job_hooks() -> tuple[JobHook, ...]:
    """The hooks added, in the order they are entered."""
    return _registry.hooks


def call_hooked(func: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)`` inside every hook (a plain call when there is none: the
    worker's hot path costs one tuple check per job)."""
    hooks = _registry.hooks
    if not hooks:
        return func(*args, **kwargs)
    with ExitStack() as stack:
        for hook in hooks:
            stack.enter_context(hook())
        return func(*args, **kwargs)
