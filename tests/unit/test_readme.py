"""README.md is the front door: its "At a glance" names every public name, every CLI command
and every SQL view, and its links into the documentation site resolve (to a page and, with a
``#fragment``, to a heading of it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer.main

import pgqueue
import pgqueue.alembic
import pgqueue.contrib.django
from pgqueue.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_every_public_name_is_named() -> None:
    names = [
        name
        for module in (pgqueue, pgqueue.contrib.django, pgqueue.alembic)
        for name in module.__all__
    ]
    missing = [name for name in names if f"`{name}`" not in README]
    assert not missing, f"public names the README does not name: {missing}"


def _commands(command: Any, path: str) -> list[str]:
    if hasattr(command, "commands"):  # a group (typer bundles its own click)
        return [
            c for name, sub in command.commands.items() for c in _commands(sub, f"{path} {name}")
        ]
    return [path]


def test_every_cli_command_is_named() -> None:
    commands = _commands(typer.main.get_command(app), "pgq")
    assert len(commands) > 30
    missing = [c for c in commands if not re.search(rf"`{re.escape(c)}[` ]", README)]
    assert not missing, f"CLI commands the README does not name: {missing}"


def test_every_sql_view_is_named() -> None:
    views = {
        m.group(1)
        for path in (ROOT / "migrations" / "sql" / "views").rglob("*.sql")
        for m in re.finditer(r"CREATE (?:OR REPLACE )?VIEW (pgqueue\.\w+)", path.read_text(), re.I)
    }
    assert len(views) >= 10
    missing = sorted(v for v in views if f"`{v}`" not in README)
    assert not missing, f"SQL views the README does not name: {missing}"


def _slug(heading: str) -> str:
    """A heading's anchor, as python-markdown's toc (mkdocs' default) makes it."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text).strip("-")


def _anchors(path: Path) -> set[str]:
    anchors, fenced = set(), False
    for line in path.read_text().split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^#+ (.*)$", line)):
            anchors.add(_slug(m.group(1)))
    return anchors


def test_links_resolve() -> None:
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", README):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, fragment = target.partition("#")
        file = ROOT / path if path else ROOT / "README.md"
        if not file.exists() or (fragment and fragment not in _anchors(file)):
            broken.append(target)
    assert not broken, f"README links that lead nowhere: {broken}"


def test_the_link_check_finds_a_broken_anchor() -> None:
    assert _slug("Least privilege: `pgq roles`") == "least-privilege-pgq-roles"
    assert "the-reaper" in _anchors(ROOT / "docs" / "guide" / "workers.md")
    assert "no-such-heading" not in _anchors(ROOT / "docs" / "guide" / "workers.md")
