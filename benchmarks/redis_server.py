"""A private Redis for the broker-based peers: Debian's ``redis-server``, started by the harness
on a free loopback port with persistence off, and a minimal client (RESP over a socket) for the
harness's own queue-depth checks, so the project's venv needs no Redis library.

Persistence is off (``save ""``, ``appendonly no``): the brokers keep jobs in memory only,
which is how their throughput guides run them and what the comparison's caveat says.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

START_TIMEOUT = 10.0


class RedisError(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def encode(*args: str | int | float | bytes) -> bytes:
    """One command in RESP (an array of bulk strings)."""
    out = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def parse(stream: Any) -> Any:
    """One RESP reply from a binary file object (``socket.makefile('rb')``)."""
    line = stream.readline()
    if not line:
        raise RedisError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RedisError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return None
        data = stream.read(size + 2)
        return data[:-2]
    if kind == b"*":
        size = int(rest)
        return None if size < 0 else [parse(stream) for _ in range(size)]
    raise RedisError(f"unexpected reply {line!r}")


class Client:
    """Blocking one-connection client: enough for LLEN, HLEN, ZCARD, FLUSHDB, PING."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        parts = urlsplit(url)
        self._sock = socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or 6379), timeout=timeout
        )
        self._file = self._sock.makefile("rb")
        database = parts.path.strip("/")
        if database:
            self.command("SELECT", database)

    def command(self, *args: str | int | float | bytes) -> Any:
        self._sock.sendall(encode(*args))
        return parse(self._file)

    def close(self) -> None:
        self._file.close()
        self._sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def command(url: str, *args: str | int | float | bytes) -> Any:
    with Client(url) as client:
        return client.command(*args)


def binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        raise RuntimeError(
            "redis-server is needed for the Celery, Dramatiq and arq comparison "
            "(Debian: apt-get install redis-server)"
        )
    return found


@contextlib.contextmanager
def server() -> Iterator[str]:
    """``redis://127.0.0.1:PORT`` of a new private server, stopped (and its files removed)
    afterwards."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as tmp:
        log = Path(tmp) / "redis.log"
        proc = subprocess.Popen(
            [
                binary(),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                tmp,
                "--logfile",
                str(log),
                "--daemonize",
                "no",
                "--databases",
                "16",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        url = f"redis://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                try:
                    if command(url, "PING") == "PONG":
                        break
                except OSError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    text = log.read_text(errors="replace") if log.exists() else ""
                    raise RuntimeError(f"redis-server did not start:\n{text[-2000:]}")
                time.sleep(0.05)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
