"""What ``import pgqueue`` costs a producer: the client, not the worker, the CLI, the dashboard or
the migration tooling (those load when used). Measured in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = (
    *("pgqueue.worker", "pgqueue.cli", "pgqueue.dashboard", "pgqueue.contrib", "pgqueue.alembic"),
    *("alembic", "sqlalchemy", "starlette", "uvicorn", "typer"),
)


def loaded_after(statement: str) -> list[str]:
    code = f"import sys, json; {statement}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return list(json.loads(out))


def test_import_pgqueue_loads_no_worker_cli_or_migration_modules():
    loaded = loaded_after("import pgqueue")
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert bad == []


def test_the_public_names_still_come_from_pgqueue():
    loaded = loaded_after(
        "from pgqueue import JobContext, JobTimeout, PgQueue, current_job, chain; "
        "from pgqueue.worker import Worker"
    )
    assert "pgqueue.worker.worker" in loaded  # the worker loads when asked for
