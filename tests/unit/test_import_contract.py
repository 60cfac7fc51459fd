"""What ``import pgqueue`` costs a producer: the client, not the worker, the CLI, the dashboard or
the migration tooling (those load when used). Measured in a fresh interpreter."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

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


# -- the layers, read from the source: module-level imports only (a function may import
# -- upward lazily, and TYPE_CHECKING imports are for annotations) -------------------------

PACKAGE = Path(__file__).resolve().parents[2] / "pgqueue"


def _runtime_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:  # module level only
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if not isinstance(node, ast.FunctionDef | ast.ClassDef) else ():
            if isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                found.add(sub.module)
                found.update(f"{sub.module}.{alias.name}" for alias in sub.names)
            elif isinstance(sub, ast.Import):
                found.update(alias.name for alias in sub.names)
    return {name for name in found if name.startswith("pgqueue")}


def _module(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


# (importing package, package it must not import at module level)
RULES = [
    ("pgqueue", "pgqueue.cli"),  # only the CLI itself
    ("pgqueue", "pgqueue.dashboard"),  # only the dashboard and its CLI command
    ("pgqueue.worker", "pgqueue.client"),  # the worker drives plans, not the client
    ("pgqueue.dashboard", "pgqueue.cli"),
    ("pgqueue.db", "pgqueue.client"),
    ("pgqueue.db", "pgqueue.worker"),
]
ALLOWED = {("pgqueue.cli.dashboard_cmd", "pgqueue.dashboard")}


def test_layers_point_one_way():
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module(path)
        for importer, forbidden in RULES:
            inside = module == importer or module.startswith(importer + ".")
            own = module == forbidden or module.startswith(forbidden + ".")
            if not inside or own or (module, forbidden) in ALLOWED:
                continue
            for name in _runtime_imports(path):
                if name == forbidden or name.startswith(forbidden + "."):
                    problems.append(f"{module} imports {name}")
    assert problems == []
