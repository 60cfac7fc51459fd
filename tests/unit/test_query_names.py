"""Every query in ``pgqueue/db/queries/`` is used, and every query name the code uses is there.

Found from the source, not by running it: each call that takes a query name (``query(...)``,
``Query(...)``, ``CopyIn(...)``, the worker's ``WorkerStore.fetch(...)``, and any function that
passes one of its parameters on to them, found by following the calls) must name its query so
that this test can tell which: a string, a conditional between strings, a loop over strings, a
module-level dict of strings, or a step being run (``step.name``). Anything else fails the test,
so a name never hides in a computed string.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pgqueue.db.queries import all_queries, parse
from pgqueue.worker.store import PLANNED_EACH_TIME

PACKAGE = Path(__file__).resolve().parents[2] / "pgqueue"
# Callables whose first argument (or ``name=``) is a query name.
TAKERS = {"query": 0, "Query": 0, "CopyIn": 0, "fetch": 0}


@dataclass(frozen=True)
class Site:
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.path.relative_to(PACKAGE.parent)}:{self.line}"


@dataclass
class Module:
    path: Path
    tree: ast.Module
    parents: dict[ast.AST, ast.AST]


def modules() -> list[Module]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        found.append(Module(path, tree, parents))
    return found


def callee(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


Function = ast.FunctionDef | ast.AsyncFunctionDef


def enclosing_function(module: Module, node: ast.AST) -> Function | None:
    while node in module.parents:
        node = module.parents[node]
        if isinstance(node, Function):
            return node
    return None


def strings(node: ast.expr) -> list[str] | None:
    """The strings an expression can be, when it is made of literals only."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        body, orelse = strings(node.body), strings(node.orelse)
        return None if body is None or orelse is None else body + orelse
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        parts = [strings(element) for element in node.elts]
        return None if any(p is None for p in parts) else [s for p in parts for s in p or []]
    return None


class Resolver:
    def __init__(self) -> None:
        self.modules = modules()
        self.used: dict[str, list[Site]] = {}
        self.unresolved: list[str] = []

    def use(self, names: list[str], site: Site) -> None:
        for name in names:
            self.used.setdefault(name, []).append(site)

    def calls(self, name: str) -> Iterator[tuple[Module, ast.Call]]:
        for module in self.modules:
            for node in ast.walk(module.tree):
                if isinstance(node, ast.Call) and callee(node) == name:
                    yield module, node

    def run(self) -> None:
        takers = dict(TAKERS)
        pending = list(takers)
        while pending:
            taker = pending.pop()
            for module, call in self.calls(taker):
                argument = self.name_argument(call, takers[taker])
                if argument is None:
                    continue  # e.g. a .fetch() of something else without arguments
                passed_on = self.resolve(module, call, argument)
                if passed_on is not None and passed_on[0] not in takers:
                    takers[passed_on[0]] = passed_on[1]
                    pending.append(passed_on[0])

    @staticmethod
    def name_argument(call: ast.Call, position: int) -> ast.expr | None:
        if len(call.args) > position:
            return call.args[position]
        return next((k.value for k in call.keywords if k.arg == "name"), None)

    def resolve(self, module: Module, call: ast.Call, node: ast.expr) -> tuple[str, int] | None:
        """Record the names ``node`` can be; return (function, position) when it is a parameter
        of the enclosing function, whose own callers then say which names."""
        site = Site(module.path, call.lineno)
        literal = strings(node)
        if literal is not None:
            self.use(literal, site)
            return None
        if isinstance(node, ast.Attribute) and node.attr == "name":
            return None  # a step being run: its name was checked where the step was made
        function = enclosing_function(module, call)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            table = self.module_dict(module, node.value.id)
            if table is not None:
                self.use(table, site)
                return None
        if isinstance(node, ast.Name) and function is not None:
            parameters = [a.arg for a in function.args.posonlyargs + function.args.args]
            if node.id in parameters:
                position = parameters.index(node.id)
                if parameters and parameters[0] in ("self", "cls"):
                    position -= 1
                return function.name, position
            assigned = self.local_strings(function, node.id)
            if assigned is not None:
                self.use(assigned, site)
                return None
        self.unresolved.append(f"{site}: {ast.unparse(node)}")
        return None

    @staticmethod
    def module_dict(module: Module, name: str) -> list[str] | None:
        """The values of a module-level ``name = {...}`` of strings."""
        for statement in module.tree.body:
            if not isinstance(statement, ast.Assign) or not isinstance(statement.value, ast.Dict):
                continue
            if any(isinstance(t, ast.Name) and t.id == name for t in statement.targets):
                values = [strings(v) for v in statement.value.values if v is not None]
                if all(v is not None for v in values):
                    return [s for v in values for s in v or []]
        return None

    @staticmethod
    def local_strings(function: Function, name: str) -> list[str] | None:
        """What a local variable can hold: every assignment of it in the function (and every
        loop over it) must be made of literals."""
        found: list[str] = []
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets
            ):
                value = strings(node.value)
            elif isinstance(node, ast.For | ast.AsyncFor) and (
                isinstance(node.target, ast.Name) and node.target.id == name
            ):
                value = strings(node.iter)
            else:
                continue
            if value is None:
                return None
            found += value
        return found or None


@pytest.fixture(scope="module")
def resolved() -> Resolver:
    resolver = Resolver()
    resolver.run()
    return resolver


def test_every_query_name_the_code_passes_can_be_told(resolved):
    assert not resolved.unresolved, (
        "query names this test cannot tell (pass a string, or a variable holding strings):\n"
        + "\n".join(resolved.unresolved)
    )


def test_every_name_used_is_defined(resolved):
    known = set(all_queries())
    unknown = {name: sites for name, sites in resolved.used.items() if name not in known}
    assert not unknown, "\n".join(
        f"{name}: used at {', '.join(map(str, sites))}" for name, sites in sorted(unknown.items())
    )
    assert known >= PLANNED_EACH_TIME, sorted(PLANNED_EACH_TIME - known)


def test_every_query_is_used(resolved):
    unused = sorted(set(all_queries()) - set(resolved.used))
    assert not unused, f"the query files define queries nothing runs: {unused}"


def test_the_workers_names_are_checked_too(resolved):
    """The worker passes names to WorkerStore.fetch, which the old test of Query()/query() calls
    did not see."""
    worker = {
        name
        for name, sites in resolved.used.items()
        if any(site.path.is_relative_to(PACKAGE / "worker") for site in sites)
    }
    assert {"claim_jobs", "claim_flow", "ack_jobs", "ack_jobs_waking", "heartbeat"} <= worker


def test_fragments_are_written_once_and_used():
    text = (
        "-- fragment: head\nWITH x AS (SELECT 1 AS n)\n"
        "-- name: a\n{{head}}\nSELECT n FROM x\n"
        "-- name: b\n{{head}}, y AS (SELECT 2)\nSELECT n FROM x, y\n"
        "-- fragment: rows\n  FROM t\n WHERE k = 1\n"
        "-- name: c\nSELECT *\n{{rows}}\n"
    )
    assert parse(text) == {
        "a": "WITH x AS (SELECT 1 AS n)\nSELECT n FROM x",
        "b": "WITH x AS (SELECT 1 AS n), y AS (SELECT 2)\nSELECT n FROM x, y",
        "c": "SELECT *\n  FROM t\n WHERE k = 1",
    }
    assert "head" not in parse(text)
    with pytest.raises(ValueError, match="names no fragment"):
        parse("-- name: a\n{{nothing}}\n")
    with pytest.raises(ValueError, match="no query uses: spare"):
        parse("-- fragment: spare\nSELECT 1\n-- name: a\nSELECT 2\n")
    with pytest.raises(ValueError, match="twice"):
        parse("-- fragment: a\nSELECT 1\n-- name: a\n{{a}}\n")
