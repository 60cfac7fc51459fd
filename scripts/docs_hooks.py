"""mkdocs hooks (mkdocs.yml ``hooks:``).

``cli.md`` (the CLI reference, in the nav as "CLI reference") is generated from the typer app
by its own generator; until a ``docs/cli.md`` exists, this hook adds a plain one built from the
same app, so the site builds (and its links to ``cli.md`` resolve) either way.
"""

from __future__ import annotations

from typing import Any

import typer.main
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files


def _command_lines(command: Any, path: str) -> list[str]:
    lines = [f"## `{path}`", ""]
    help_text = (command.help or "").strip()
    if help_text:
        lines += [help_text.split("\n\n")[0].replace("\n", " "), ""]
    if hasattr(command, "commands"):  # a group (typer bundles its own click)
        for name, sub in sorted(command.commands.items()):
            lines += _command_lines(sub, f"{path} {name}")
        return lines
    params = [p for p in command.params if p.name != "help"]
    if params:
        lines += ["| argument or option | meaning |", "|---|---|"]
        for param in params:
            names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
            meaning = (getattr(param, "help", None) or "").replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {names} | {meaning} |")
        lines.append("")
    return lines


def cli_reference() -> str:
    """The CLI reference as Markdown, from the typer app behind ``pgq``."""
    from pgqueue.cli.app import app

    root: Any = typer.main.get_command(app)
    lines = ["# CLI reference", "", "Every `pgq` command with its arguments and options.", ""]
    for name, command in sorted(root.commands.items()):
        lines += _command_lines(command, f"pgq {name}")
    return "\n".join(lines) + "\n"


def on_files(files: Files, config: MkDocsConfig, **kwargs: Any) -> Files:
    if files.get_file_from_path("cli.md") is None:
        files.append(File.generated(config, "cli.md", content=cli_reference()))
    return files
