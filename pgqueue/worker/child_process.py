"""A child process of ``--pool process`` as the operating system sees it: started, signalled,
its exit told apart.

Children are started with multiprocessing's ``spawn`` start method (a fresh interpreter: no
fork of a process with an event loop, open connections and threads), from one long-lived
spawner thread so the loop never waits for a fork+exec. Each has two pipes (the worker's ends
are returned to it, the child's closed here once it has its copies). On Linux the worker
watches and signals each child through a pidfd (exit noticed even if a handler's own
subprocess inherited the pipes; no signal can reach a recycled pid).

Also here: the errors a job gets when its child dies or never starts. Their names are stored in
jobs' error records as ``pgqueue.worker.process_pool.<name>`` (where they were first defined),
so they keep that module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from pgqueue.handler.job_transaction import TransactionHost
from pgqueue.worker.child import main as child_main

_SPAWN = multiprocessing.get_context("spawn")
_ERRORS_MODULE = "pgqueue.worker.process_pool"


class ChildProcessDied(Exception):
    """The child process running a sync handler died before the handler returned: a crash
    (segfault in a C extension, ``os._exit``) or a kill from outside (the OOM killer's
    SIGKILL). A failed attempt, retried like any other error."""


class ChildStartFailed(Exception):
    """No child process could be started for the job: the app failed to import in it, or it
    did not start within the start timeout."""


ChildProcessDied.__module__ = ChildStartFailed.__module__ = _ERRORS_MODULE


@dataclass(slots=True)
class ChildGone:
    """The attempt ended without an answer: the child died, or none could be started."""

    error: Exception


@dataclass(frozen=True, slots=True)
class ChildSettings:
    """How the worker runs its children (``WorkerSettings.child_settings``)."""

    app_spec: str  # "module:attribute", imported by every child
    max_jobs: int | None = None  # replace a child after this many jobs
    max_memory_mb: float | None = None  # replace a child whose RSS after a job is above this
    stop_grace: float = 2.0  # cancel / lost lease: how long the handler may take to stop itself
    kill_grace: float = 1.0  # SIGTERM to SIGKILL
    start_timeout: float = 60.0  # importing the app in a new child


def describe_exit(code: int | None) -> str:
    """How a child ended, for the job's error: "killed by SIGSEGV", "exited with status 3"."""
    if code is None:
        return "exited"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        if -code == signal.SIGKILL:
            return f"killed by {name} (the kernel's OOM killer sends SIGKILL too)"
        return f"killed by {name}"
    return f"exited with status {code}"


def child_config(
    settings: ChildSettings, worker_id: str, transactions: TransactionHost | None
) -> dict[str, Any]:
    """What a new child is started with (plain values: nothing of the app is pickled)."""
    config: dict[str, Any] = {
        "app": settings.app_spec,
        "worker_id": worker_id,
        "parent_pid": os.getpid(),
        "log_level": logging.getLogger().getEffectiveLevel(),
    }
    if transactions is not None:
        config["transactions"] = {
            "dsn": transactions.dsn,
            "application_name": transactions.application_name,
            "prepare": transactions.prepare,
        }
    return config


def _child_entry(config: dict[str, Any], inbox: Connection, outbox: Connection) -> None:
    """The spawned process's target (imported by reference: nothing of the app is pickled)."""
    child_main(config, inbox, outbox)


@dataclass(slots=True)
class Process:
    """A started child: the process, its pidfd (Linux) and the worker's ends of its pipes."""

    process: BaseProcess
    pid: int
    write_fd: int
    read_fd: int
    pidfd: int | None = None
    gone: bool = field(default=False)

    @property
    def exit_fd(self) -> int:
        """Readable once the process has exited."""
        return self.pidfd if self.pidfd is not None else self.process.sentinel

    def signal(self, signum: int) -> None:
        if self.gone:
            return
        with contextlib.suppress(ProcessLookupError):
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signum)
            else:
                os.kill(self.pid, signum)

    def exitcode(self) -> int | None:
        return self.process.exitcode  # waitpid(WNOHANG)

    def close_pidfd(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def release(self) -> None:
        """It is gone: no more signals; close the pidfd and the process object."""
        self.gone = True
        self.close_pidfd()
        with contextlib.suppress(ValueError):
            self.process.close()


def _launch(config: dict[str, Any]) -> Process:
    """In the spawner thread: start the process and its pipes."""
    to_child, to_child_w = os.pipe()
    from_child_r, from_child = os.pipe()
    inbox = Connection(to_child, writable=False)
    outbox = Connection(from_child, readable=False)
    try:
        process = _SPAWN.Process(
            target=_child_entry,
            args=(config, inbox, outbox),
            name="pgqueue-child",
            # Terminated by multiprocessing at exit should the worker ever leave one behind;
            # the child clears the flag for itself, so handlers may start processes of their
            # own.
            daemon=True,
        )
        process.start()
    except BaseException:
        os.close(to_child_w)
        os.close(from_child_r)
        raise
    finally:
        inbox.close()  # the child has its own copies now
        outbox.close()
    pid = process.pid or 0
    pidfd = None
    # Opened before anything can reap the child (only this thread's next start() could).
    with contextlib.suppress(AttributeError, OSError):
        pidfd = os.pidfd_open(pid)
    return Process(process, pid, to_child_w, from_child_r, pidfd)


class Spawner:
    """The one thread that starts every child: Linux's parent-death signal (set by the
    child) follows the thread that forked it, so that thread must outlive them."""

    def __init__(self) -> None:
        self._thread: ThreadPoolExecutor | None = None

    async def launch(self, config: dict[str, Any]) -> Process:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="pgqueue-spawner")
        return await asyncio.get_running_loop().run_in_executor(self._thread, _launch, config)

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=False)
            self._thread = None
