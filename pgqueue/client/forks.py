"""What a client opened before a fork is its parent's: the child forgets it.

A pre-forking server (gunicorn ``--preload``, a multiprocessing pool started by ``fork``) copies
a client with its pools, their connections, and the locks their threads held at that instant. A
child that used those sockets would mix its statements with the parent's; one that closed them
would end the parent's sessions; a lock held at the fork by a thread the child does not have is
never released. So right after a fork, in the child, each client drops all of it, unclosed, and
opens its own on its next call. What it dropped stays referenced here for the child's life:
nothing it does, not its garbage collector either, touches the parent's sessions (psycopg
finishes a connection only in the process that opened it; this keeps the connections' and the
pools' finalizers from running at all).
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol


class ForgetsAtFork(Protocol):
    def forget_after_fork(self) -> None:
        """In a child just forked: drop what the parent opened (see :func:`inherited`)."""


_TRACKED: weakref.WeakSet[ForgetsAtFork] = weakref.WeakSet()
_INHERITED: list[object] = []


def track(owner: ForgetsAtFork) -> None:
    """Have ``owner.forget_after_fork()`` called in every child forked from now on."""
    _TRACKED.add(owner)


def inherited(*things: object) -> None:
    """Keep what a child dropped (its parent's) from being closed or collected."""
    _INHERITED.extend(thing for thing in things if thing is not None)


def _in_child() -> None:
    for owner in list(_TRACKED):
        owner.forget_after_fork()


if hasattr(os, "register_at_fork"):  # (not on Windows, which has no fork)
    os.register_at_fork(after_in_child=_in_child)
