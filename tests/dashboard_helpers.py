"""Run `pgq dashboard` as a real process for the dashboard tests, and talk to it over HTTP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.error
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


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@contextmanager
def dashboard(dsn: str, *args: str, log: Path | None = None) -> Iterator[Dashboard]:
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PGQUEUE_DASHBOARD_TOKEN", None)
    env.pop("PGQUEUE_DASHBOARD_BASIC_AUTH", None)
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [PGQ, "dashboard", "--port", str(port), "--dsn", dsn, *args],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    board = Dashboard(f"http://127.0.0.1:{port}", process)
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
