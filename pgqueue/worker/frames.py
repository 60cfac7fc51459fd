"""The wire format between a worker and its child processes (``--pool process``): every
message kind, built and read here by field name, for both sides.

Every message is one JSON object in a frame of :class:`multiprocessing.connection.Connection`'s
own format (a 4-byte big-endian signed length, or ``-1`` and an 8-byte length for frames over
2 GiB, then the bytes), so the child uses ``Connection.send_bytes``/``recv_bytes`` on blocking
pipes while the worker parses the same frames from non-blocking reads on its event loop
(:class:`FrameReader`): a slow or half-written message never blocks the loop.

Only JSON crosses: job data is JSON already, and a child must never unpickle anything the
worker did not write itself (nor the worker anything a handler's process wrote).

Message kinds (the ``t`` field), worker to child: ``job``, ``batch``, ``cancel``,
``terminate``, ``exit``; child to worker: ``ready``, ``fatal``, ``log``, ``progress``, ``tx``,
``done``. Each has a builder here and, where a field is read, a reader that takes the fields
by name and refuses what is not of the protocol (a job's fields are :class:`ClaimedJob`'s).
A message about one job names it by ``id`` and ``token`` (its lease token).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast, get_args

from pgqueue.handler.job_context import CLAIMED_COLUMNS, ClaimedJob
from pgqueue.rules.vocabulary import (
    HISTORY_STATES,
    TRANSACTION_STATES,
    CancelReason,
    HistoryState,
    TransactionState,
    cancel_reason,
)
from pgqueue.worker.outcome import Kind, Outcome

Message = dict[str, Any]
JobKey = tuple[int, int]  # (job id, lease token)
#: Every kind of message, in the order listed above.
KINDS: tuple[str, ...] = ("job", "batch", "cancel", "terminate", "exit")
KINDS += ("ready", "fatal", "log", "progress", "tx", "done")

_SHORT = struct.Struct("!i")
_LONG = struct.Struct("!Q")
_SHORT_MAX = 0x7FFFFFFF


def dumps(message: Message) -> bytes:
    """A message's bytes (the body of its frame: ``Connection.send_bytes`` adds the length)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()


def encode(message: Message) -> bytes:
    """One message as a whole frame, length first."""
    body = dumps(message)
    if len(body) > _SHORT_MAX:
        return _SHORT.pack(-1) + _LONG.pack(len(body)) + body
    return _SHORT.pack(len(body)) + body


def decode(body: bytes | bytearray) -> Message:
    message = json.loads(body)
    if not isinstance(message, dict):
        raise ValueError(f"a frame must hold a JSON object, got {type(message).__name__}")
    return message


class FrameReader:
    """Splits a byte stream into messages; bytes of an incomplete frame wait for the rest."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Message]:
        buffer = self._buffer
        buffer += data
        messages: list[Message] = []
        start = 0
        while len(buffer) - start >= _SHORT.size:
            (size,) = _SHORT.unpack_from(buffer, start)
            header = _SHORT.size
            if size == -1:
                if len(buffer) - start < header + _LONG.size:
                    break
                (size,) = _LONG.unpack_from(buffer, start + header)
                header += _LONG.size
            elif size < 0:
                raise ValueError(f"corrupt frame length {size}")
            end = start + header + size
            if len(buffer) < end:
                break
            messages.append(decode(buffer[start + header : end]))
            start = end
        if start:
            del buffer[:start]
        return messages

    @property
    def pending(self) -> int:
        """Bytes of a frame not complete yet."""
        return len(self._buffer)


def key_of(message: Message) -> tuple[Any, Any]:
    """The job a message is about (compared with a key, never trusted as one)."""
    return (message.get("id"), message.get("token"))


# -- the worker to a child ---------------------------------------------------------------------

_DATES = frozenset(("created_at", "run_at"))


def job_fields(job: ClaimedJob) -> Message:
    """A claimed job's fields by name. The claimed args (JSON from jsonb) go back out as JSON:
    nothing is pickled. ``leased_at`` is the worker's own clock and stays there."""
    fields: Message = {}
    for name in CLAIMED_COLUMNS:
        value = getattr(job, name)
        fields[name] = value.isoformat() if name in _DATES else value
    if not isinstance(job.meta, dict):
        fields["meta"] = None
    return fields


def claimed_job(fields: Message) -> ClaimedJob:
    """The job :func:`job_fields` describes; KeyError or ValueError if it does not."""
    values: Message = {}
    for name in CLAIMED_COLUMNS:
        value = fields[name]
        values[name] = datetime.fromisoformat(value) if name in _DATES else value
    return ClaimedJob(**values)


def job(claimed: ClaimedJob, *, wake: bool, unsettled: bool) -> Message:
    """Run one job. ``wake``: its completion notifies its queue (it took a limit's last free
    place); ``unsettled``: its claim may not have committed yet (the completion waits)."""
    return {
        "t": "job",
        "id": claimed.id,
        "token": claimed.lease_token,
        "job": job_fields(claimed),
        "wake": wake,
        "unsettled": unsettled,
    }


@dataclass(frozen=True, slots=True)
class JobOrder:
    """A ``job`` message, read."""

    job: ClaimedJob
    wake: bool
    unsettled: bool


def read_job(message: Message) -> JobOrder:
    return JobOrder(
        claimed_job(message["job"]), bool(message.get("wake")), bool(message.get("unsettled"))
    )


def batch(key: JobKey, jobs: list[tuple[ClaimedJob, CancelReason | None]]) -> Message:
    """One call for the jobs of a batch (``key``: its first job's). A job asked to stop before
    the batch got here carries the reason, and starts so in the child."""
    return {
        "t": "batch",
        "id": key[0],
        "token": key[1],
        "jobs": [{"job": job_fields(job), "cancelled": reason} for job, reason in jobs],
    }


@dataclass(frozen=True, slots=True)
class BatchOrder:
    """A ``batch`` message, read."""

    key: JobKey
    jobs: list[tuple[ClaimedJob, CancelReason | None]]


def read_batch(message: Message) -> BatchOrder:
    jobs = [
        (
            claimed_job(part["job"]),
            None if part.get("cancelled") is None else cancel_reason(part["cancelled"]),
        )
        for part in message["jobs"]
    ]
    return BatchOrder((int(message["id"]), int(message["token"])), jobs)


def cancel(key: JobKey, reason: CancelReason, *, whole_batch: bool = False) -> Message:
    """Stop the job ``key`` (``ctx.cancelled`` in the child); ``whole_batch``: every job of the
    batch whose key it is."""
    return {"t": "cancel", "id": key[0], "token": key[1], "reason": reason, "batch": whole_batch}


@dataclass(frozen=True, slots=True)
class CancelOrder:
    """A ``cancel`` message, read."""

    key: JobKey
    reason: CancelReason
    whole_batch: bool


def read_cancel(message: Message) -> CancelOrder:
    return CancelOrder(
        (int(message["id"]), int(message["token"])),
        cancel_reason(message["reason"]),
        bool(message.get("batch")),
    )


def terminate() -> Message:
    """A SIGTERM follows: raise in the handler so it unwinds."""
    return {"t": "terminate"}


def exit_() -> Message:
    """Run no more jobs: exit once idle."""
    return {"t": "exit"}


# -- a child to the worker ---------------------------------------------------------------------


def ready(pid: int, tasks: list[str]) -> Message:
    """The app is imported; ``tasks``: the sync tasks it has."""
    return {"t": "ready", "pid": pid, "tasks": tasks}


def read_ready(message: Message) -> frozenset[str]:
    """The sync tasks a ready child has."""
    tasks = message.get("tasks")
    return (
        frozenset(t for t in tasks if isinstance(t, str))
        if isinstance(tasks, list)
        else frozenset()
    )


def fatal(error: str) -> Message:
    """The app could not be imported (the traceback); the child exits."""
    return {"t": "fatal", "error": error}


def read_fatal(message: Message) -> str:
    return str(message.get("error") or "")


def log(record: Message) -> Message:
    """A log record's plain fields (the worker hands it to its own logging set-up)."""
    return {"t": "log", "record": record}


def read_log(message: Message) -> Message:
    record = message.get("record")
    return record if isinstance(record, dict) else {}


def progress(key: JobKey, value: str) -> Message:
    """What ``ctx.report_progress`` reported (the worker's heartbeat writes it)."""
    return {"t": "progress", "id": key[0], "token": key[1], "value": value}


def read_progress(message: Message) -> str | None:
    value = message.get("value")
    return value if isinstance(value, str) else None


def tx(key: JobKey, state: TransactionState | None, completed_as: HistoryState | None) -> Message:
    """Where the handler's ``ctx.transaction()`` stands: sent before each step, so the
    heartbeat can tell a job being completed from a lost lease."""
    return {"t": "tx", "id": key[0], "token": key[1], "state": state, "as": completed_as}


_TX_STATES = frozenset((None, *TRANSACTION_STATES))


def read_tx(message: Message) -> tuple[TransactionState | None, HistoryState | None] | None:
    """The transaction's state and what it completed the job as; None if not of the protocol."""
    state = message.get("state")
    if state not in _TX_STATES:
        return None
    done_as = message.get("as")
    return (
        cast("TransactionState | None", state),
        cast(HistoryState, done_as) if done_as in HISTORY_STATES else None,
    )


ReplyKind = Kind | Literal["stopped"]
_REPLY_KINDS = frozenset((*get_args(Kind), "stopped"))


@dataclass(slots=True)
class ChildReply:
    """What the attempt amounted to, decided in the child, where the exception object is: the
    task's retry_on / no_retry_on and its backoff (which may look at the error) apply there,
    with the very code the thread pool uses (``pgqueue.worker.outcome``). For a batch,
    ``items`` holds each job's, in the order the jobs were sent."""

    kind: ReplyKind  # an Outcome kind, or "stopped": the handler raised JobCancelled
    delay: float = 0.0
    error: str | None = None
    summary: str | None = None
    result: str | None = None
    items: list[ChildReply] = field(default_factory=list)

    @classmethod
    def of(cls, outcome: Outcome) -> ChildReply:
        return cls(outcome.kind, outcome.delay, outcome.error, outcome.summary, outcome.result)

    def fields(self) -> Message:
        return {
            "kind": self.kind,
            "delay": self.delay,
            "error": self.error,
            "summary": self.summary,
            "result": self.result,
        }

    @classmethod
    def read(cls, message: Message) -> ChildReply | None:
        """The reply a ``done`` message (or one job's part of it) holds; None if malformed."""
        kind = message.get("kind")
        if kind not in _REPLY_KINDS:
            return None
        return cls(
            cast(ReplyKind, kind),
            float(message.get("delay") or 0.0),
            message.get("error"),
            message.get("summary"),
            message.get("result"),
        )


STOPPED = ChildReply("stopped")


def done(key: JobKey, reply: ChildReply, rss: int | None) -> Message:
    """The attempt is over (for a batch, ``reply.items`` holds each job's); ``rss``: the
    child's memory after it."""
    message = {"t": "done", "id": key[0], "token": key[1], "rss": rss, **reply.fields()}
    if reply.items:
        message["items"] = [item.fields() for item in reply.items]
    return message


def read_done(message: Message, batch_size: int) -> ChildReply | None:
    """The reply of a ``done`` message: for a batch of ``batch_size`` jobs (0: one job), one
    answer per job, in order. None if malformed."""
    answer = ChildReply.read(message)
    if answer is None or not batch_size:
        return answer
    parts = message.get("items")
    parts = parts if isinstance(parts, list) else []
    items = [ChildReply.read(p) if isinstance(p, dict) else None for p in parts]
    if len(items) != batch_size or not all(items):
        return None
    answer.items = cast("list[ChildReply]", items)
    return answer


def read_rss(message: Message) -> int | None:
    rss = message.get("rss")
    return rss if isinstance(rss, int) else None
