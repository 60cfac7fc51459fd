"""The worker <-> child wire format and the child's exit descriptions (no processes, no DB)."""

from __future__ import annotations

import os
import signal
import struct
from datetime import UTC, datetime
from multiprocessing.connection import Connection

import pytest

from pgqueue.worker import frames
from pgqueue.worker.process_pool import describe_exit


def test_frames_split_anywhere_come_out_whole_and_in_order():
    messages = [{"t": "job", "id": i, "args": {"text": "é" * i}} for i in range(50)]
    stream = b"".join(frames.encode(m) for m in messages)
    for size in (1, 3, 7, 64, 1000):
        reader = frames.FrameReader()
        seen = []
        for start in range(0, len(stream), size):
            seen += reader.feed(stream[start : start + size])
        assert seen == messages and reader.pending == 0


def test_frames_are_what_multiprocessing_connection_reads_and_writes():
    read_fd, write_fd = os.pipe()
    reader, writer = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    try:
        message = {"t": "done", "kind": "ack", "result": "[1,2]", "big": "x" * 20_000}
        os.write(write_fd, frames.encode(message))  # the worker's side, to a child
        assert frames.decode(reader.recv_bytes()) == message
        writer.send_bytes(frames.dumps(message))  # a child's side, to the worker
        assert frames.FrameReader().feed(os.read(read_fd, 1 << 16)) == [message]
    finally:
        reader.close()
        writer.close()


def test_a_corrupt_frame_is_refused():
    with pytest.raises(ValueError, match="corrupt frame length"):
        frames.FrameReader().feed(struct.pack("!i", -5) + b"xxxx")
    with pytest.raises(ValueError, match="JSON object"):
        frames.FrameReader().feed(struct.pack("!i", 3) + b"[1]")


def test_exit_descriptions():
    assert describe_exit(3) == "exited with status 3"
    assert describe_exit(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert describe_exit(-signal.SIGKILL).startswith("killed by SIGKILL (")
    assert describe_exit(-200) == "killed by signal 200"


def test_a_park_crosses_the_pipe_whole():
    from dataclasses import astuple

    from pgqueue.handler.parking import JobParked

    until = datetime(2027, 1, 2, 3, 4, 5, tzinfo=UTC)
    for parked in (
        JobParked(7, 3, "sleep", 2, "sleep#1", until=until),
        JobParked(7, 3, "sleep", 2, "nap", delay=1.5),
        JobParked(8, 1, "wait", 4, "wait:paid#1", event="paid", timeout=None),
        JobParked(8, 1, "wait", 4, "wait:paid#1", event="paid", timeout=60.0),
    ):
        reply = frames.ChildReply("park", park=frames.park_fields(parked))
        sent = frames.encode(frames.done((parked.job_id, parked.lease_token), reply, None))
        answer = frames.read_done(frames.decode(sent[4:]), 0)
        assert answer is not None and answer.kind == "park" and answer.park is not None
        back = frames.read_park(answer.park)
        assert back is not None and astuple(back) == astuple(parked)
    assert frames.read_park({"job_id": "x"}) is None  # malformed: the worker fails the attempt
