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
# The directory is the layer: a module's layer is the folder it sits in, directly under
# pgqueue/. pure rules -> db -> handler -> client | worker -> cli | dashboard -> contrib: a
# module imports only from its own layer and the layers below (and a sibling never from the
# other sibling). Every import counts, at module level or inside a function (an import in a
# function to dodge a cycle is an upward import all the same); imports under
# ``if TYPE_CHECKING:`` do not (an annotation may name a class of a higher layer: it loads
# nothing).
#
# The package root is the public face: ``__init__`` (the public names) and the documented import
# paths kept there (``pgqueue.alembic``, and the deprecated ones of modules that moved), above
# the client and the worker. Its two modules that import nothing of pgqueue, ``errors`` and
# ``_version``, are the floor every layer stands on.

PACKAGE = Path(__file__).resolve().parents[2] / "pgqueue"

RANK = {
    "floor": -1,
    "rules": 0,  # values, validation and computations; no I/O, no SQL
    "db": 1,  # connections, named queries, plans and what drives them
    "handler": 2,  # what a running handler holds: its context, its transaction, its logs
    "client": 3,
    "worker": 3,
    "face": 4,  # the package root: the public names and the documented import paths
    "cli": 5,
    "dashboard": 5,
    "testing": 5,  # users' test suites: runs jobs with the worker's pieces on the client's pool
    "contrib": 6,
}
FLOOR = {"pgqueue.errors", "pgqueue._version", "pgqueue._lazy"}
# The one import between siblings: `pgq dashboard` serves the dashboard.
ALLOWED = {("pgqueue.cli.dashboard_cmd", "pgqueue.dashboard")}


def layer_of(module: str) -> str | None:
    """The folder under pgqueue/ that ``module`` sits in (None: a folder with no rank)."""
    if module in FLOOR:
        return "floor"
    parts = module.split(".")
    if parts[0] != "pgqueue":
        return None
    if len(parts) == 1 or (PACKAGE / f"{parts[1]}.py").exists():
        return "face"
    return parts[1] if parts[1] in RANK else None


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
    """A new folder under pgqueue/ is given its rank in RANK before anything lands in it."""
    assert [_module(path) for path in MODULES if layer_of(_module(path)) is None] == []


def test_the_floor_imports_nothing_of_pgqueue():
    floor = [path for path in MODULES if _module(path) in FLOOR]
    assert len(floor) == len(FLOOR)
    assert {_module(path): imports_of(path.read_text(), _module(path)) for path in floor} == {
        module: set() for module in sorted(FLOOR)
    }


def _is_reexport(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return True
    if isinstance(statement, ast.Expr):  # the docstring, or the deprecation's warnings.warn()
        value = statement.value
        return isinstance(value, ast.Constant) or (
            isinstance(value, ast.Call) and ast.unparse(value.func) == "warnings.warn"
        )
    if isinstance(statement, ast.If) and ast.unparse(statement.test) == "TYPE_CHECKING":
        # Names imported when first used (pgqueue/_lazy.py), as type checkers read them.
        return all(map(_is_reexport, [*statement.body, *statement.orelse]))
    return isinstance(statement, ast.Assign) and ast.unparse(statement.targets[0]) == "__all__"


def test_the_root_keeps_only_the_public_face():
    """Nothing lives at the package root but the public names, the floor and the documented
    import paths, each a thin re-export of the module that does the work."""
    root = [path for path in PACKAGE.glob("*.py") if _module(path) not in FLOOR]
    bodies = {_module(path): ast.parse(path.read_text()).body for path in root}
    assert {name: all(map(_is_reexport, body)) for name, body in bodies.items()} == {
        name: True for name in bodies
    }


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
    source = (PACKAGE / "rules" / "retry.py").read_text() + (
        "\nfrom pgqueue.db import plan\n"
        "\ndef _f() -> None:\n    from pgqueue.client import core\n"
        "\nif TYPE_CHECKING:\n    from pgqueue.worker.worker import Worker\n"
    )
    retry = "pgqueue.rules.retry"
    assert upward_imports(retry, imports_of(source, retry)) == [
        "pgqueue.rules.retry (rules) imports pgqueue.client.core (client)",
        "pgqueue.rules.retry (rules) imports pgqueue.db.plan (db)",
    ]
    worker = "pgqueue.worker.fetcher"
    assert upward_imports(worker, {"pgqueue.client", "pgqueue.db.plan", "pgqueue.errors"}) == [
        "pgqueue.worker.fetcher (worker) imports pgqueue.client (client)"
    ]
    assert upward_imports("pgqueue.cli.dashboard_cmd", {"pgqueue.dashboard.app"}) == []
    assert upward_imports("pgqueue.cli.ops", {"pgqueue.dashboard.app"}) != []
    # the handler's modules stand on the database, under the client and the worker
    assert upward_imports("pgqueue.db.admin", {"pgqueue.handler.job_context"}) != []
    assert upward_imports("pgqueue.worker.executor", {"pgqueue.handler.job_context"}) == []
    # the public face gathers the client; the worker never imports it
    assert upward_imports("pgqueue", {"pgqueue.client.core"}) == []
    assert upward_imports("pgqueue.worker.fetcher", {"pgqueue.logs"}) != []


def test_nothing_below_the_client_names_it_even_for_annotations():
    """A task, a workflow or a batch task names what it uses of its client with a protocol
    (``rules/app.py``; a part of the client: ``client/part.py``), so no import circle, not even
    one of annotations, runs through the client."""
    below = [
        path for path in MODULES if RANK.get(layer_of(_module(path)) or "", 9) < RANK["client"]
    ]
    naming: list[str] = []
    for path in below:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            naming += [
                f"{_module(path)} imports {name}"
                for name in names
                if name == "pgqueue.client" or name.startswith("pgqueue.client.")
            ]
    assert naming == []
