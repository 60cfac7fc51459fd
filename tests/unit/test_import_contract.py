"""What ``import pgqueue`` costs a producer: the client, not the worker, the CLI, the dashboard or
the migration tooling (those load when used). Measured in a fresh interpreter."""

from __future__ import annotations

import ast
import graphlib
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


# -- the layers, read from the source ------------------------------------------------------
#
# pure rules -> db -> client | worker -> cli | dashboard -> contrib: a module imports only from
# its own layer and the layers below (and a sibling never from the other sibling). Every import
# counts, at module level or inside a function (an import in a function to dodge a cycle is an
# upward import all the same); imports under ``if TYPE_CHECKING:`` do not (an annotation may
# name a class of a higher layer, say the PgQueue a worker is handed: it loads nothing).

PACKAGE = Path(__file__).resolve().parents[2] / "pgqueue"

# Each module's layer, by its name or the package it is in (the longest match wins).
LAYERS: dict[str, str] = {
    # Pure rules: values, validation and computations; no I/O, no SQL.
    **dict.fromkeys(
        (
            *("pgqueue._version", "pgqueue.errors", "pgqueue.durations", "pgqueue.config"),
            *("pgqueue.payload", "pgqueue.options", "pgqueue.dedupe", "pgqueue.retry"),
            "pgqueue.codec",
            *("pgqueue.flow", "pgqueue.schedules", "pgqueue.job_specs", "pgqueue.progress"),
            *("pgqueue.tracing", "pgqueue.gc_pause", "pgqueue.tasks", "pgqueue.workflow"),
            "pgqueue.job_hooks",
        ),
        "pure",
    ),
    # The database: connections, named queries, plans and what drives them; and what a running
    # handler holds (its context opens ctx.transaction(), so it and what reads it live here).
    **dict.fromkeys(
        (
            *("pgqueue.db", "pgqueue.admin", "pgqueue.ops", "pgqueue.inspect", "pgqueue.search"),
            *("pgqueue.results", "pgqueue.results_listener", "pgqueue.retention"),
            *("pgqueue.declarations", "pgqueue.roles", "pgqueue.alembic"),
            *("pgqueue.job_transaction", "pgqueue.job_context", "pgqueue.batch"),
            *("pgqueue.logs", "pgqueue.log_queue"),
        ),
        "db",
    ),
    "pgqueue": "client",  # the package's own __init__: the public names
    "pgqueue.client": "client",
    "pgqueue.worker": "worker",
    "pgqueue.cli": "cli",
    "pgqueue.demo": "cli",
    "pgqueue.dashboard": "dashboard",
    "pgqueue.contrib": "contrib",
    # Users' test suites: runs jobs with the worker's pieces on the client's connections.
    "pgqueue.testing": "testing",
}
RANK = {
    **{"pure": 0, "db": 1, "client": 2, "worker": 2, "cli": 3, "dashboard": 3, "testing": 3},
    "contrib": 4,
}
# The one import between siblings: `pgq dashboard` serves the dashboard.
ALLOWED = {("pgqueue.cli.dashboard_cmd", "pgqueue.dashboard")}


def layer_of(module: str) -> str | None:
    for name in sorted(LAYERS, key=len, reverse=True):
        if module == name or module.startswith(name + "."):
            return LAYERS[name]
    return None


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    relative = Path(*name.split("."))
    return (PACKAGE.parent / relative).with_suffix(".py").exists() or (
        PACKAGE.parent / relative / "__init__.py"
    ).exists()


def imports_of(source: str, module: str, *, package: bool = False) -> set[str]:
    """The pgqueue modules ``source`` (the text of ``module``) imports at run time, wherever
    the import statement is."""
    parent = module if package else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = parent.split(".")[: len(parent.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in child.names:
                    # `from pgqueue.db import plan` imports the module pgqueue.db.plan
                    name = f"{base}.{alias.name}"
                    found.add(name if _is_module(name) else base)
            visit(child)

    visit(ast.parse(source))
    return {name for name in found if name == "pgqueue" or name.startswith("pgqueue.")}


def upward_imports(module: str, imported: set[str]) -> list[str]:
    own = layer_of(module)
    problems = []
    for name in sorted(imported):
        target = layer_of(name)
        if own is None or target is None:
            continue
        if any(module == m and (name == p or name.startswith(p + ".")) for m, p in ALLOWED):
            continue
        sibling = RANK[target] == RANK[own] and target != own
        if RANK[target] > RANK[own] or sibling:
            problems.append(f"{module} ({own}) imports {name} ({target})")
    return problems


def _problems(path: Path) -> list[str]:
    module = _module(path)
    package = path.name == "__init__.py"
    return upward_imports(module, imports_of(path.read_text(), module, package=package))


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    assert [_module(path) for path in MODULES if layer_of(_module(path)) is None] == []


def test_layers_point_one_way():
    assert [problem for path in MODULES for problem in _problems(path)] == []


def test_no_import_cycles():
    """Within a layer too: an import placed in a function so that two modules can import each
    other is a cycle all the same (graphlib names it)."""
    graph = {}
    for path in MODULES:
        module = _module(path)
        imported = imports_of(path.read_text(), module, package=path.name == "__init__.py")
        graph[module] = imported - {module}
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError


def test_the_check_sees_upward_imports():
    """An import of a higher layer fails the check, at module level or inside a function; one
    for annotations only does not."""
    source = (PACKAGE / "retry.py").read_text() + (
        "\nfrom pgqueue.db import plan\n"
        "\ndef _f() -> None:\n    from pgqueue.client import core\n"
        "\nif TYPE_CHECKING:\n    from pgqueue.worker.worker import Worker\n"
    )
    assert upward_imports("pgqueue.retry", imports_of(source, "pgqueue.retry")) == [
        "pgqueue.retry (pure) imports pgqueue.client.core (client)",
        "pgqueue.retry (pure) imports pgqueue.db.plan (db)",
    ]
    worker = "pgqueue.worker.fetcher"
    assert upward_imports(worker, {"pgqueue.client", "pgqueue.db.plan", "pgqueue.errors"}) == [
        "pgqueue.worker.fetcher (worker) imports pgqueue.client (client)"
    ]
    assert upward_imports("pgqueue.cli.dashboard_cmd", {"pgqueue.dashboard.app"}) == []
    assert upward_imports("pgqueue.cli.ops", {"pgqueue.dashboard.app"}) != []
