"""The CLI documents itself: every ``pgq`` command's ``--help`` ends with an example that parses,
and ``docs/cli.md`` is what ``make cli-docs`` generates from the app (never stale)."""

from __future__ import annotations

import difflib
import functools
import shlex
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from pgqueue import __version__
from pgqueue.cli.app import app
from pgqueue.cli.common import example, examples_in
from scripts import cli_reference

SHELL_OPERATORS = {">", ">>", "<", "|", "&&", "||", ";", "&"}


@functools.cache
def commands() -> list[tuple[str, Any, Any]]:
    return [(context.command_path, command, context) for command, context in cli_reference.walk()]


def test_docs_cli_md_is_current():
    expected = cli_reference.render()
    actual = cli_reference.OUTPUT.read_text() if cli_reference.OUTPUT.exists() else ""
    if actual != expected:
        diff = "".join(
            list(
                difflib.unified_diff(
                    actual.splitlines(keepends=True),
                    expected.splitlines(keepends=True),
                    "docs/cli.md",
                    "generated",
                )
            )[:40]
        )
        pytest.fail(
            f"docs/cli.md is stale: regenerate it with `{cli_reference.COMMAND}` "
            f"(python -m scripts.cli_reference)\n{diff}"
        )


def test_the_walk_sees_every_command():
    paths = [path for path, _, _ in commands()]
    assert len(paths) == len(set(paths))
    # a leaf, a group, a subcommand of a group, the root: all of them are documented
    assert {"pgq", "pgq work", "pgq dlq", "pgq dlq replay", "pgq retention set"} <= set(paths)
    assert len(paths) > 40


def test_every_command_has_an_example():
    missing = [path for path, command, _ in commands() if not examples_in(command.epilog)]
    assert missing == [], (
        "these commands' --help has no example: add "
        "epilog=example('pgq ...') (pgqueue.cli.common.example) where they are registered: "
        + ", ".join(missing)
    )


def _resolve(tokens: list[str]) -> tuple[str, Any, list[str]]:
    """The command a command line names (deepest group member) and the arguments left over."""
    root: Any = typer.main.get_command(app)
    context = typer.Context(root, info_name="pgq")
    command, path, rest = root, "pgq", tokens[1:]
    while hasattr(command, "list_commands") and rest and not rest[0].startswith("-"):
        sub = command.get_command(context, rest[0])
        if sub is None:
            break
        path, command, rest = f"{path} {rest[0]}", sub, rest[1:]
        context = typer.Context(command, info_name=path.rsplit(" ", 1)[1], parent=context)
    return path, command, rest


@pytest.mark.parametrize("path", [path for path, _, _ in commands()])
def test_each_example_is_for_its_command_and_parses(path):
    [command] = [c for p, c, _ in commands() if p == path]
    shown = CliRunner().invoke(app, [*path.split()[1:], "--help"], env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.output
    for line in examples_in(command.epilog):
        # --help shows it as written (rich would swallow [...] it took for markup)
        assert line in shown.output, (path, line)
        tokens = shlex.split(line)
        if any(token in SHELL_OPERATORS for token in tokens):
            tokens = tokens[: min(tokens.index(t) for t in tokens if t in SHELL_OPERATORS)]
        assert tokens[0] == "pgq", line
        named, leaf, rest = _resolve(tokens)
        assert named == path or named.startswith(path + " "), (path, line)
        # Parsing runs the options' types and range checks; a misspelt option, a missing
        # argument or a bad value is an error here.
        leaf_context = typer.Context(leaf, info_name=named.rsplit(" ", 1)[-1])
        leaf.parse_args(leaf_context, rest)


def test_examples_in_reads_what_example_writes():
    assert examples_in(example("pgq stats")) == ["pgq stats"]
    assert examples_in(example("pgq a", "pgq b --json")) == ["pgq a", "pgq b --json"]
    assert examples_in("See the docs.") == []
    assert examples_in(None) == []


def test_an_example_that_does_not_parse_is_caught():
    # The check above can fail: a misspelt option is a usage error when parsed.
    _, leaf, rest = _resolve(["pgq", "stats", "--jsn"])
    with pytest.raises(Exception, match="No such option"):
        leaf.parse_args(typer.Context(leaf, info_name="stats"), rest)


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"pgqueue {__version__}"


def test_help_ends_with_the_example():
    result = CliRunner().invoke(app, ["stats", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "Example: pgq stats --json" in result.output
