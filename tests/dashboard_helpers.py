"""Run `pgq dashboard` as a real process for the dashboard tests, and talk to it over HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import PGQ, ROOT, wait_for


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Dashboard:
    url: str
    port: int
    process: subprocess.Popen[bytes]

    def request(
        self,
        path: str,
        *,
        method: str = "GET",
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], str]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers=headers or {}
        )
        if data is not None:
            req.add_header("Content-Type", "application/json")
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(req, timeout=15) as response:
                return response.status, dict(response.headers), response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read().decode()

    def raw(self, request: bytes) -> bytes:
        """Send bytes as they are (urllib always adds a Host header) and return the reply."""
        host = urllib.parse.urlsplit(self.url).hostname or "127.0.0.1"
        with socket.create_connection((host, self.port), timeout=15) as sock:
            sock.sendall(request)
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
            return reply


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@contextmanager
def dashboard(
    dsn: str,
    *args: str,
    log: Path | None = None,
    bind: str | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[Dashboard]:
    """``pgq dashboard`` on a free port; ``bind`` is passed as ``--host`` (the default,
    127.0.0.1, otherwise), and the test talks to it on 127.0.0.1 either way."""
    port = free_port()
    environ = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name in (
        "PGQUEUE_DASHBOARD_TOKEN",
        "PGQUEUE_DASHBOARD_BASIC_AUTH",
        "PGQUEUE_DASHBOARD_ALLOWED_HOSTS",
    ):
        environ.pop(name, None)
    environ.update(env or {})
    host_args = ["--host", bind] if bind else []
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [PGQ, "dashboard", "--port", str(port), "--dsn", dsn, *host_args, *args],
        cwd=ROOT,
        env=environ,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    local = "127.0.0.1" if bind in (None, "0.0.0.0") else bind
    board = Dashboard(f"http://{local}:{port}", port, process)
    try:
        wait_for(lambda: _healthy(board), timeout=30, message="the dashboard to start")
        yield board
    finally:
        process.terminate()
        process.wait(15)
        if log:
            out.close()


def _healthy(board: Dashboard) -> bool:
    if board.process.poll() is not None:
        raise AssertionError(f"pgq dashboard exited with {board.process.returncode}")
    try:
        return board.request("/healthz")[0] == 200
    except OSError:
        return False
