"""gunicorn ``--preload``: the application, with its ``PgQueue`` made and used at import, is
loaded once in the master and forked into the workers. Every worker enqueues through
connections of its own (never the master's, which the fork copied), and every request
succeeds."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg

REQUESTS = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url, timeout=30) as answer:
        answered: dict[str, int] = json.loads(answer.read())
    return answered


def test_workers_forked_from_a_preloaded_app_enqueue_on_their_own_connections(app_dsn, tmp_path):
    port = _free_port()
    gunicorn = shutil.which("gunicorn") or str(Path(sys.executable).parent / "gunicorn")
    log = (tmp_path / "gunicorn.log").open("w")
    server = subprocess.Popen(
        [
            gunicorn, "--preload", "--workers", "3", "--bind", f"127.0.0.1:{port}",
            "--chdir", str(Path(__file__).resolve().parents[2]),
            "tests.integration.preload_app:application",
        ],
        env={**os.environ, "PGQUEUE_DSN": app_dsn},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its workers with it, to kill them all if it hangs
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 60
        while True:
            try:
                _get(url + "?0")
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "gunicorn.log").read_text()
                assert time.monotonic() < deadline, "gunicorn did not answer"
                time.sleep(0.1)
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(_get, [f"{url}?{n}" for n in range(1, REQUESTS + 1)]))
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
    text = (tmp_path / "gunicorn.log").read_text()
    assert "Traceback" not in text, text
    assert len(answers) == REQUESTS
    (master,) = {answer["master"] for answer in answers}
    assert master not in {answer["backend"] for answer in answers}  # never the master's
    assert len({answer["pid"] for answer in answers}) >= 2  # forked workers served them
    with psycopg.connect(app_dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE queue = 'web'").fetchone()
    assert row == (1 + 1 + REQUESTS,)  # the master's, the first request's, the others
