"""The code in README.md and docs/**/*.md runs, against a real PostgreSQL.

Conventions (written up for authors in docs/development.md, "Code in the docs"):

- ``python``, ``bash``/``sh``/``shell``, ``console`` and ``sql`` blocks run; other languages
  (``yaml``, ``ini``, output without a language) are not code to run.
- A page is one session: a fresh database of its own (``$PGQUEUE_DSN`` and ``$DATABASE_URL``),
  a working directory of its own (the current directory, first on ``sys.path``), and one Python
  namespace that its ``python`` blocks share, run in page order, interleaved with its shell and
  SQL blocks. A top-level ``await`` runs on the page's event loop.
- Shell blocks run in ``bash -e`` (``pipefail`` too); ``console`` blocks run their ``$ `` lines
  (the other lines are output). SQL blocks run on the page's database.
- A block with a ``title`` (```` ```python title="tasks.py" ````, any language) is a file: it is
  written to that path in the working directory, for the blocks after it to import or run
  (``pgq work tasks:pgq --burst``), and is not run itself.
- A block that cannot run here carries ``<!-- not run: REASON -->`` on the line right above its
  opening fence. They are counted and printed, and kept few (``MAX_NOT_RUN``).

A block that raises or exits non-zero fails its page's test, naming the page and line.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pgqueue import PgQueue
from tests import pgq_forkserver

ROOT = Path(__file__).resolve().parents[2]
# Generated from the typer app (the CLI reference): its examples are `pgq --help`'s, not prose.
GENERATED = {"docs/cli.md"}
PAGES = sorted(
    page
    for page in (
        str(p.relative_to(ROOT)) for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    )
    if page not in GENERATED
)
RUN = {"python", "bash", "sh", "shell", "console", "sql"}
SHELL = {"bash", "sh", "shell", "console"}
# Fences this test knows are not code to run (a language it does not know fails the test).
NOT_CODE = {"", "yaml", "ini", "text", "json", "toml"}
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>\S.*?) -->$")
FENCE = re.compile(r"^```(?P<lang>[\w-]*)(?P<attrs>.*)$")
TITLE = re.compile(r'title="(?P<title>[^"]+)"')
MAX_NOT_RUN = 16
# A block that has not ended by then never will (a command that runs until stopped). Room for
# a page of thirty CLI calls on a busy machine (the suite runs in parallel on two cores).
BLOCK_TIMEOUT = 300


@dataclass
class Block:
    page: str
    line: int  # of the first line of code (the line after the fence)
    lang: str
    title: str | None
    code: str
    not_run: str | None  # the reason, when marked

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def parse(text: str, page: str) -> list[Block]:
    """The fenced blocks of a page, each with the not-run reason marked above it, if any."""
    lines = text.split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            next_line = lines[i + 1] if i + 1 < len(lines) else ""
            assert not NOT_RUN.match(lines[i].strip()) or FENCE.match(next_line), (
                f"{page}:{i + 1}: a not-run marker must be right above an opening fence"
            )
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and lines[i] != "```":
            i += 1
        assert i < len(lines), f"{page}:{start + 1}: unclosed code block"
        marker = NOT_RUN.match(lines[start - 1].strip()) if start else None
        title = TITLE.search(match["attrs"])
        blocks.append(
            Block(
                page,
                start + 2,
                match["lang"],
                title["title"] if title else None,
                "\n".join(lines[start + 1 : i]),
                marker["reason"] if marker else None,
            )
        )
        i += 1
    return blocks


ALL_BLOCKS = {page: parse((ROOT / page).read_text(), page) for page in PAGES}
PAGES_WITH_CODE = [
    page
    for page, blocks in ALL_BLOCKS.items()
    if any(b.lang in RUN and b.not_run is None for b in blocks)
]


def test_every_block_is_known_and_few_are_not_run(capsys: pytest.CaptureFixture[str]) -> None:
    """Every fence has a known language; the not-run ones are listed, with their reasons."""
    blocks = [b for page in ALL_BLOCKS.values() for b in page]
    unknown = [f"{b.where} ```{b.lang}" for b in blocks if b.lang not in RUN | NOT_CODE]
    assert not unknown, f"code blocks in a language this test does not know: {unknown}"
    marked_other = [b.where for b in blocks if b.not_run and b.lang not in RUN and not b.title]
    assert not marked_other, f"not-run markers on blocks that would not run anyway: {marked_other}"
    runnable = [b for b in blocks if b.lang in RUN or b.title]
    files = [b for b in runnable if b.title and not b.not_run]
    not_run = [b for b in runnable if b.not_run]
    ran = len(runnable) - len(files) - len(not_run)
    lines = [
        f"doc snippets: {ran} run, {len(files)} written as files, {len(not_run)} not run",
        *(f"  not run: {b.where} ({b.lang}): {b.not_run}" for b in not_run),
    ]
    with capsys.disabled():  # printed in every run, passing or not
        print("\n" + "\n".join(lines))
    assert ran >= 40, lines[0]  # the parser still finds the blocks
    assert len(not_run) <= MAX_NOT_RUN, "\n".join(lines)


def test_a_failing_block_names_its_page_and_line(tmp_path: Path, dsn: str) -> None:
    """The runner itself: a raising block and a failing command fail, naming page and line."""
    text = "text\n\n```python\nx = 1\nassert x == 2\n```\n\n```bash\ntrue\nfalse\n```\n"
    python, bash = parse(text, "page.md")
    with Session("page.md", dsn, tmp_path / "work") as session:
        with pytest.raises(AssertionError, match=r"^page\.md:5: .*AssertionError"):
            session.run(python)
        with pytest.raises(AssertionError, match=r"^page\.md:9: .*exited 1"):
            session.run(bash)
        # A shell block's pgq (the fork server's) fails as the real one does, and reads and
        # writes the block's own streams.
        real = subprocess.run(
            [Path(sys.executable).parent / "pgq", "jobs", "show", "424242"],
            env={**os.environ, "PGQUEUE_DSN": dsn},
            capture_output=True,
            text=True,
            check=False,
        )
        assert real.returncode != 0
        (check,) = parse(
            "```bash\n"
            f'test "$(command -v pgq)" != {Path(sys.executable).parent / "pgq"}\n'
            "pgq --version | grep -q '^pgqueue '\n"
            "echo retry | pgq --help | grep -q 'Usage: pgq'\n"
            f"pgq jobs show 424242 2> err || status=$?; test $status = {real.returncode}\n"
            f'test "$(cat err)" = {real.stderr.strip()!r}\n'
            "pgq jobs show 424242\n"
            "```\n",
            "page.md",
        )
        with pytest.raises(AssertionError, match=rf"exited {real.returncode}"):
            session.run(check)
        with pytest.raises(AssertionError, match="right above an opening fence"):
            parse("<!-- not run: no reason -->\n\n```bash\ntrue\n```\n", "page.md")


class Session:
    """One page's database, working directory, namespace and event loop, and the ``pgq`` its
    shell blocks run: each command a fresh process forked from one that has imported pgqueue
    already (tests/pgq_forkserver.py), its exit status checked as any command's."""

    def __init__(self, page: str, dsn: str, workdir: Path) -> None:
        self.page = page
        self.dsn = url(dsn)  # pages read $DATABASE_URL as a URL (SQLAlchemy wants one)
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.namespace: dict[str, Any] = {"__name__": "snippets"}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.env = {
            **os.environ,
            "PGQUEUE_DSN": dsn,
            "DATABASE_URL": dsn,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def __enter__(self) -> Session:
        self._start_pgq_server()
        self._saved = (os.getcwd(), list(sys.path), set(sys.modules), dict(os.environ))
        os.chdir(self.workdir)
        sys.path.insert(0, str(self.workdir))
        os.environ["PGQUEUE_DSN"] = self.dsn
        os.environ["DATABASE_URL"] = self.dsn
        return self

    def _start_pgq_server(self) -> None:
        # Not under the working directory: a socket's path must be short.
        self._pgq_dir = Path(tempfile.mkdtemp(prefix="pgq-docs-"))
        socket_path = str(self._pgq_dir / "pgq.sock")
        (self._pgq_dir / "bin").mkdir()
        pgq_forkserver.write_client(self._pgq_dir / "bin" / "pgq", socket_path)
        real_pgq = str(Path(sys.executable).parent / "pgq")
        self._pgq_server = subprocess.Popen(
            [sys.executable, "-m", "tests.pgq_forkserver", socket_path, real_pgq],
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._pgq_server.stdout is not None
        ready = self._pgq_server.stdout.readline()
        assert ready == "ready\n", f"the pgq fork server did not start: {ready!r}"
        self.env["PATH"] = f"{self._pgq_dir / 'bin'}{os.pathsep}{self.env['PATH']}"

    def _stop_pgq_server(self) -> None:
        self._pgq_server.kill()
        self._pgq_server.wait()
        assert self._pgq_server.stdout is not None
        self._pgq_server.stdout.close()
        shutil.rmtree(self._pgq_dir, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        self._stop_pgq_server()
        cwd, path, modules, environ = self._saved
        mine = [
            m
            for name in set(sys.modules) - modules
            if (m := sys.modules[name]) is not None
            and str(getattr(m, "__file__", "") or "").startswith(str(self.workdir))
        ]
        queues = {
            id(v): v
            for scope in [self.namespace, *(vars(m) for m in mine)]
            for v in scope.values()
            if isinstance(v, PgQueue)
        }
        for queue in queues.values():
            if self.loop is not None:
                self.loop.run_until_complete(queue.aclose())
            queue.close()
        if self.loop is not None:
            self.loop.close()
        for m in mine:
            del sys.modules[m.__name__]
        os.chdir(cwd)
        sys.path[:] = path
        os.environ.clear()
        os.environ.update(environ)

    def run(self, block: Block) -> None:
        if block.title:
            target = self.workdir / block.title
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code + "\n")
            if block.lang == "python":  # a file with a syntax error fails where it is written
                compile(block.code, block.where, "exec")
        elif block.lang == "python":
            self._python(block)
        elif block.lang == "sql":
            self._sql(block)
        else:
            self._shell(block)

    def _python(self, block: Block) -> None:
        # Padded so that tracebacks give the line numbers of the page.
        source = "\n" * (block.line - 1) + block.code
        code = compile(source, block.page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        try:
            if code.co_flags & inspect.CO_COROUTINE:
                if self.loop is None:
                    self.loop = asyncio.new_event_loop()
                self.loop.run_until_complete(eval(code, self.namespace))
            else:
                exec(code, self.namespace)
        except Exception as e:
            line = _line_in(e, block.page) or block.line
            raise AssertionError(
                f"{block.page}:{line}: the python block starting at line {block.line} raised "
                f"{type(e).__name__}: {e}"
            ) from e

    def _sql(self, block: Block) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute(block.code.encode())
        except psycopg.Error as e:
            raise AssertionError(f"{block.where}: the sql block failed: {e}") from e

    def _shell(self, block: Block) -> None:
        if block.lang == "console":
            script = "\n".join(
                line[2:] if line.startswith("$ ") else "" for line in block.code.split("\n")
            )
        else:
            script = block.code
        trap = f"trap 'echo \"{block.page}:$LINENO: exit status $?\" >&2' ERR"
        padded = trap + "\n" * (block.line - 1) + script + "\n"
        try:
            result = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", padded],
                check=False,
                cwd=self.workdir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=BLOCK_TIMEOUT,
            )
        except subprocess.TimeoutExpired as e:
            raise AssertionError(
                f"{block.where}: the shell block ran for over {BLOCK_TIMEOUT} s "
                "(write long-running commands runnable, e.g. --burst, or mark them not run)"
            ) from e
        if result.returncode != 0:
            raise AssertionError(
                f"{block.where}: the shell block exited {result.returncode}\n"
                f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
            )


def url(dsn: str) -> str:
    """A ``postgresql://`` URL for a libpq DSN (the test server's is in keyword form)."""
    params = conninfo_to_dict(dsn)
    user = quote(str(params.pop("user", "")), safe="")
    dbname = quote(str(params.pop("dbname", "")), safe="")
    host = str(params.pop("host", ""))
    netloc = f"{user}@" if user else ""
    if host.startswith("/"):
        params["host"] = host
    else:
        netloc += host + (f":{params.pop('port')}" if "port" in params else "")
    return f"postgresql://{netloc}/{dbname}" + (f"?{urlencode(params)}" if params else "")


def _line_in(error: BaseException, page: str) -> int | None:
    tb = error.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == page:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "work"


@pytest.mark.timeout(2 * BLOCK_TIMEOUT)
@pytest.mark.parametrize("page", PAGES_WITH_CODE)
def test_page_code_runs(page: str, dsn: str, workdir: Path) -> None:
    with Session(page, dsn, workdir) as session:
        for block in ALL_BLOCKS[page]:
            if (block.lang in RUN or block.title) and block.not_run is None:
                session.run(block)
