"""Write the sync twins of pgqueue's async code: the async code is the source, the sync generated.

Run ``make sync-twins`` (``python -m scripts.async_to_sync``) after changing an async source;
``make lint`` runs it with ``--check``, which writes nothing and exits 1, naming each stale file,
when a generated twin differs from what its source gives (``tests/unit/test_sync_twins.py``
checks the same).

A module marks each pair with three comment lines, at the indentation of the code they hold
(module level or a class body)::

    # sync-twin: async source
    async def run_async(...): ...
    # sync-twin: generated from the async source above by `make sync-twins`; do not edit
    def run(...): ...
    # sync-twin: end

Everything between the second and the third line is rewritten from the async source:

- ``await x`` becomes ``x``; ``async def``, ``async with``, ``async for`` (comprehensions too)
  their sync forms;
- names are renamed by :data:`NAMES` (``AsyncConnection`` -> ``Connection``, ``asyncio.sleep``
  -> ``time.sleep``, ...), and a name ending in ``_async`` loses the suffix (``run_async`` ->
  ``run``: the project's spelling of a twin). The renames apply to code, comments, docstrings and
  f-strings; other string literals (messages, SQL names) are data and stay as written;
- ``if True:  # ASYNC`` keeps its body in the async source (the ``else`` branch is dead code
  there, which type checkers skip) and becomes its ``else`` branch, or nothing, in the sync twin:
  the few places where the two differ beyond the renames.

The result is formatted with ruff as part of its file. The transform edits the source text where
the syntax tree says (it does not print the tree anew), so comments and layout carry over.
"""

from __future__ import annotations

import argparse
import ast
import io
import itertools
import re
import subprocess
import sys
import textwrap
import tokenize
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Where marked modules are looked for.
PACKAGE = ROOT / "pgqueue"
COMMAND = "make sync-twins"

SOURCE_MARK = "# sync-twin: async source"
GENERATED_MARK = f"# sync-twin: generated from the async source above by `{COMMAND}`; do not edit"
END_MARK = "# sync-twin: end"
ASYNC_BLOCK = "# ASYNC"
# The mark, maybe followed by another comment (a noqa for the async source).
_ASYNC_COMMENT = re.compile(r":\s*" + re.escape(ASYNC_BLOCK) + r"(\s+#.*)?$")

#: Async name -> sync name, beyond the ``_async`` suffix rule (a dotted name is matched whole).
NAMES: dict[str, str] = {
    "AbstractAsyncContextManager": "AbstractContextManager",
    "AsyncExitStack": "ExitStack",
    "AsyncConnection": "Connection",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncConnT": "SyncConnT",
    "AsyncCursor": "Cursor",
    "AsyncIterator": "Iterator",
    "AsyncSession": "Session",
    "ACCEPTED_ASYNC": "ACCEPTED",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "async_driver": "sync_driver",
    "asynccontextmanager": "contextmanager",
    "asyncio.sleep": "time.sleep",
    "enter_async_context": "enter_context",
}

_SUFFIXED = re.compile(r"(?<!\w)([A-Za-z_]\w*?)_async(?!\w)")
_NAMED = re.compile(
    r"(?<!\w)("
    + "|".join(re.escape(name) for name in sorted(NAMES, key=len, reverse=True))
    + r")(?!\w)"
)


_FSTRING_START = getattr(tokenize, "FSTRING_START", -1)
_FSTRING_END = getattr(tokenize, "FSTRING_END", -1)


class TwinError(Exception):
    """A marked module the transform cannot handle (named, with the line)."""


def rename(text: str) -> str:
    """``text`` with every async name replaced by its sync twin's."""
    text = _NAMED.sub(lambda m: NAMES[m.group(1)], text)
    return _SUFFIXED.sub(r"\1", text)


def to_sync(source: str, where: str = "<source>") -> str:
    """The sync twin of ``source`` (dedented Python code; returned unformatted)."""
    source = _drop_async_blocks(source, where)
    tree = _parse(source, where)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and any(
            isinstance(inner, ast.Await) for inner in ast.walk(node)
        ):
            raise TwinError(
                f"{where}: an await inside an f-string (line {node.lineno} of the source): "
                "await into a variable first"
            )
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(row: int, col: int) -> int:
        return starts[row - 1] + col

    docstrings = {
        (node.body[0].lineno, node.body[0].col_offset)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
        and isinstance(node.body[0].value.value, str)
    }
    # Spans (start, end, replacement) over the source: keywords dropped, names renamed outside
    # plain string literals.
    edits: list[tuple[int, int, str]] = []
    plain: list[tuple[int, int]] = []  # string literals left as written
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    # Python 3.12 splits an f-string into tokens (3.11 keeps it one STRING): a string inside
    # one is part of the f-string, renamed as the 3.11 token would be.
    in_fstring = 0
    for token, following in itertools.pairwise(tokens):
        start = offset(*token.start)
        if token.type == _FSTRING_START:
            in_fstring += 1
        elif token.type == _FSTRING_END:
            in_fstring -= 1
        elif token.type == tokenize.NAME and token.string in ("async", "await"):
            end = offset(*following.start) if following.start[0] == token.end[0] else None
            edits.append((start, end if end is not None else offset(*token.end), ""))
        elif (
            token.type == tokenize.STRING
            and not in_fstring
            and token.start not in docstrings
            and not _is_fstring(token.string)
        ):
            plain.append((start, offset(*token.end)))
    for match in [*_NAMED.finditer(source), *_SUFFIXED.finditer(source)]:
        if not any(start <= match.start() < end for start, end in plain):
            edits.append((match.start(), match.end(), rename(match.group())))
    out = source
    for start, end, text in sorted(edits, reverse=True):
        out = out[:start] + text + out[end:]
    _check_sync(out, where)
    return out


def _is_fstring(literal: str) -> bool:
    prefix = re.match(r"[A-Za-z]*", literal)
    return prefix is not None and "f" in prefix.group().lower()


def _parse(source: str, where: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise TwinError(f"{where}: async source does not parse: {exc}") from exc


def _drop_async_blocks(source: str, where: str) -> str:
    """``if True:  # ASYNC`` blocks replaced by their ``else`` branch (or nothing)."""
    while True:
        lines = source.splitlines(keepends=True)
        block = next(
            (
                node
                for node in ast.walk(_parse(source, where))
                if isinstance(node, ast.If)
                and isinstance(node.test, ast.Constant)
                and node.test.value is True
                and _ASYNC_COMMENT.search(lines[node.lineno - 1])
            ),
            None,
        )
        if block is None:
            return source
        assert block.end_lineno is not None
        kept: list[str] = []
        first = block.orelse[0] if block.orelse else None
        if isinstance(first, ast.If) and lines[first.lineno - 1].lstrip().startswith("elif"):
            # An elif: its chain, as an if.
            kept = [re.sub(r"\belif\b", "if", lines[first.lineno - 1], count=1)]
            kept += lines[first.lineno : block.end_lineno]
        elif block.orelse:
            # The else branch: from the line after `else:` to the block's end, one level out.
            body_end = block.body[-1].end_lineno or block.body[-1].lineno
            after = next(
                row
                for row in range(body_end, block.end_lineno)
                if lines[row].strip().startswith("else")
            )
            indent = len(lines[block.lineno - 1]) - len(lines[block.lineno - 1].lstrip())
            branch = textwrap.dedent("".join(lines[after + 1 : block.end_lineno]))
            kept = [textwrap.indent(_unmarked(branch), " " * indent)]
        source = "".join(lines[: block.lineno - 1] + kept + lines[block.end_lineno :])


def _unmarked(branch: str) -> str:
    """The sync branch without the ``# noqa: F401`` its imports need in the async source (where
    they are dead code, unused) and must not carry into the twin (where they are used)."""
    return re.sub(r"  # noqa: F401$", "", branch, flags=re.MULTILINE)


def _check_sync(code: str, where: str) -> None:
    for node in ast.walk(_parse(code, where)):
        if isinstance(node, ast.Await | ast.AsyncFunctionDef | ast.AsyncWith | ast.AsyncFor) or (
            isinstance(node, ast.comprehension) and node.is_async
        ):
            raise TwinError(f"{where}: the sync twin still has async code: {ast.unparse(node)}")


@dataclass(frozen=True)
class Pair:
    """One marked pair in a module: line numbers (0-based) of its three marks."""

    source: int
    generated: int
    end: int
    indent: str


def pairs(lines: Sequence[str], where: str) -> Iterator[Pair]:
    """The marked pairs of a module, checked for order."""
    marks = [(row, line.strip()) for row, line in enumerate(lines)]
    marks = [(row, mark) for row, mark in marks if mark.startswith("# sync-twin:")]
    expected = (SOURCE_MARK, GENERATED_MARK, END_MARK)
    for index in range(0, len(marks), 3):
        group = marks[index : index + 3]
        found = tuple(mark for _, mark in group)
        if found != expected[: len(found)] or len(group) != 3:
            row = group[-1][0] + 1
            raise TwinError(
                f"{where}:{row}: sync-twin marks out of order: each pair is {SOURCE_MARK!r}, "
                f"{GENERATED_MARK!r}, {END_MARK!r}"
            )
        first = lines[group[0][0]]
        yield Pair(group[0][0], group[1][0], group[2][0], first[: len(first) - len(first.lstrip())])


def generate(path: Path) -> str:
    """The module at ``path`` with each marked pair's sync twin written from its source, and
    formatted."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    where = shown(path)
    out: list[str] = []
    done = 0
    for pair in pairs(lines, where):
        source = textwrap.dedent("".join(lines[pair.source + 1 : pair.generated]))
        twin = to_sync(source, f"{where}:{pair.source + 1}")
        out += lines[done : pair.generated + 1]
        out.append("\n" + textwrap.indent(twin.strip("\n"), pair.indent) + "\n\n")
        done = pair.end
    if not done:
        raise TwinError(f"{where}: no sync-twin marks ({SOURCE_MARK!r} ...)")
    out += lines[done:]
    return format_code("".join(out), path)


def shown(path: Path) -> str:
    """``path`` as messages name it: from the project's root when inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def format_code(text: str, path: Path) -> str:
    """``text`` as ``ruff format`` leaves it, under the project's settings wherever ``path`` is."""
    config = str(ROOT / "pyproject.toml")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "format",
            "--config",
            config,
            "--stdin-filename",
            str(path),
            "-",
        ],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if result.returncode != 0:
        raise TwinError(
            f"{shown(path)}: ruff format failed on the generated module: {result.stderr}"
        )
    return result.stdout


def marked_modules(root: Path = PACKAGE) -> list[Path]:
    return sorted(path for path in root.rglob("*.py") if SOURCE_MARK in path.read_text())


def stale(paths: Sequence[Path]) -> list[Path]:
    """The modules whose generated twins differ from what their async sources give. Both sides
    are compared as this ruff formats them: another ruff version's layout (a venv of another
    Python) is not staleness (``ruff format --check`` is what checks the layout)."""
    return [path for path in paths if generate(path) != format_code(path.read_text(), path)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 naming each stale module"
    )
    parser.add_argument("paths", nargs="*", type=Path, help="modules (default: every marked one)")
    args = parser.parse_args(argv)
    paths = [path.resolve() for path in args.paths] or marked_modules()
    try:
        if args.check:
            behind = stale(paths)
            for path in behind:
                print(
                    f"{shown(path)}: its sync twins are stale (edit the async source, "
                    f"then run `{COMMAND}`)",
                    file=sys.stderr,
                )
            return 1 if behind else 0
        for path in paths:
            text = generate(path)
            if text != path.read_text():
                path.write_text(text)
                print(f"wrote {shown(path)}")
    except TwinError as exc:
        print(f"async_to_sync: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"async_to_sync: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
