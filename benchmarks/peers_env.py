"""The benchmark's own environments for the peers, created on demand and kept between runs.

* ``benchmarks/.peers-venv``: a virtualenv with ``benchmarks/peers/requirements.txt`` (pinned),
  so the peers and their dependencies never touch the project's venv;
* ``benchmarks/.peers-venv-redis``: Celery, Dramatiq (and their Redis client), from
  ``benchmarks/peers/redis-requirements.txt``;
* ``benchmarks/.peers-venv-arq``: arq, from ``benchmarks/peers/arq-requirements.txt`` (arq pins
  ``redis<6`` while Celery's Redis transport needs a newer one, so they cannot share a venv);
* ``benchmarks/.peers-venv-oban`` and ``benchmarks/.peers-venv-chancy``: Oban-py and Chancy, each
  alone (``benchmarks/peers/{oban,chancy}-requirements.txt``), so neither pins the other's
  psycopg or the shared venv's;
* ``benchmarks/.peers-venv-dbos``: DBOS Transact (``benchmarks/peers/dbos-requirements.txt``),
  for the durable-steps comparison (``python -m benchmarks.durable``);
* ``benchmarks/peers/graphile/node_modules``: ``npm ci`` from the committed package-lock.json.

Each is (re)installed when its pin file changes (a stamp file records the installed hash).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".peers-venv"
REQUIREMENTS = HERE / "peers" / "requirements.txt"
GRAPHILE = HERE / "peers" / "graphile"
#: family -> (virtualenv, pinned requirements)
FAMILIES = {
    "postgres": (VENV, REQUIREMENTS),
    "redis": (HERE / ".peers-venv-redis", HERE / "peers" / "redis-requirements.txt"),
    "arq": (HERE / ".peers-venv-arq", HERE / "peers" / "arq-requirements.txt"),
    "oban": (HERE / ".peers-venv-oban", HERE / "peers" / "oban-requirements.txt"),
    "chancy": (HERE / ".peers-venv-chancy", HERE / "peers" / "chancy-requirements.txt"),
    "dbos": (HERE / ".peers-venv-dbos", HERE / "peers" / "dbos-requirements.txt"),
}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fresh(stamp: Path, digest: str) -> bool:
    return stamp.exists() and stamp.read_text() == digest


def python(family: str = "postgres") -> Path:
    """The interpreter of one family of peers, installing its pinned requirements if needed."""
    venv, requirements = FAMILIES[family]
    interpreter = venv / "bin" / "python"
    stamp = venv / ".requirements.sha256"
    digest = _digest(requirements)
    if interpreter.exists() and _fresh(stamp, digest):
        return interpreter
    print(f"installing the peers into {venv} (pinned: {requirements.name})", flush=True)
    if not interpreter.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(interpreter), "-m", "pip", "install", "--quiet", "-r", str(requirements)],
        check=True,
    )
    stamp.write_text(digest)
    return interpreter


def node() -> str:
    """The node binary, with Graphile Worker installed by ``npm ci`` if needed."""
    node_bin = shutil.which("node")
    npm = shutil.which("npm")
    if node_bin is None or npm is None:
        raise RuntimeError("node and npm are needed for the Graphile Worker comparison")
    lock = GRAPHILE / "package-lock.json"
    stamp = GRAPHILE / "node_modules" / ".lock.sha256"
    digest = _digest(lock)
    if not _fresh(stamp, digest):
        print("installing Graphile Worker (npm ci)", flush=True)
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=GRAPHILE,
            check=True,
            env={**os.environ, "NODE_ENV": "production"},
        )
        stamp.write_text(digest)
    return node_bin


def tool(name: str) -> Path:
    """A command-line tool installed in the peers' venv (``py-spy``)."""
    python()
    return VENV / "bin" / name
