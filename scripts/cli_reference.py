"""Write ``docs/cli.md``, the ``pgq`` command reference, from the typer app itself.

Run ``make cli-docs`` (``python -m scripts.cli_reference``) after changing a command;
``tests/unit/test_cli_reference.py`` fails while the file is stale. ``--check`` exits 1 instead
of writing when the file differs.

Every command of the click tree typer builds is written in the order ``pgq --help`` lists it:
its usage, its help text, its arguments and options (as ``--help`` shows them, defaults
included) and the example its ``--help`` ends with.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from pgqueue.cli.app import app
from pgqueue.cli.common import examples_in

OUTPUT = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
COMMAND = "make cli-docs"

HEADER = f"""# Command line reference

<!-- Generated from the pgq command line by `{COMMAND}` (python -m scripts.cli_reference):
     edit the commands' help texts, not this file. -->

Every `pgq` command, as `pgq COMMAND --help` describes it. Commands that talk to the database
take `--dsn`; without it they use `$PGQUEUE_DSN`, else `$DATABASE_URL`, else the embedded
server (`pip install 'pgqueue[embedded]'`).
"""


def walk() -> Iterator[tuple[Any, Any]]:
    """(command, context) for ``pgq`` and every command and group under it, depth first."""
    root = typer.main.get_command(app)
    root_context = typer.Context(root, info_name="pgq")

    def visit(command: Any, context: Any) -> Iterator[tuple[Any, Any]]:
        yield command, context
        if hasattr(command, "list_commands"):
            for name in command.list_commands(context):
                sub = command.get_command(context, name)
                if sub is None or sub.hidden:
                    continue
                yield from visit(sub, typer.Context(sub, info_name=name, parent=context))

    yield from visit(root, root_context)


def is_group(command: Any) -> bool:
    return hasattr(command, "list_commands")


def render() -> str:
    parts = [HEADER]
    for command, context in walk():
        parts.append(_section(command, context))
    return "\n".join(parts)


def _section(command: Any, context: Any) -> str:
    path = context.command_path
    depth = path.count(" ")
    heading = "#" * min(2 + max(depth - 1, 0), 4)
    lines = [f"{heading} `{path}`", ""]
    help_text = inspect.cleandoc(command.help or "")
    if help_text:
        lines += [help_text, ""]
    usage = command.get_usage(context).removeprefix("Usage: ")
    lines += ["```text", usage, "```", ""]
    if is_group(command):
        names = [
            name
            for name in command.list_commands(context)
            if not command.get_command(context, name).hidden
        ]
        lines += ["Commands: " + ", ".join(f"`{path} {name}`" for name in names) + ".", ""]
    records = [
        record
        for param in command.get_params(context)
        if param.name != "help" and (record := param.get_help_record(context)) is not None
    ]
    if records:
        for names, text in records:
            description = " ".join(text.split())
            lines.append(f"- `{names}`" + (f": {_escape(description)}" if description else ""))
        lines.append("")
    examples = examples_in(command.epilog)
    if examples:
        lines += ["Example:" if len(examples) == 1 else "Examples:", "", "```sh", *examples, "```"]
        lines.append("")
    return "\n".join(lines)


def _escape(text: str) -> str:
    # Help texts are plain text; in Markdown, <...> would be HTML and a * emphasis.
    return text.replace("<", "&lt;").replace("*", r"\*")


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["--check"]:
        if OUTPUT.exists() and OUTPUT.read_text() == text:
            return 0
        print(f"{OUTPUT} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1
    if argv:
        print("usage: python -m scripts.cli_reference [--check]", file=sys.stderr)
        return 2
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
