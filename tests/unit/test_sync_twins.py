"""The sync twins generated from async sources (scripts/async_to_sync.py, ``make sync-twins``):
the transform on small samples, the marks, ``--check``, and the checked-in twins being current
(the same check as ``make lint``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scripts import async_to_sync
from scripts.async_to_sync import (
    END_MARK,
    GENERATED_MARK,
    ROOT,
    SOURCE_MARK,
    TwinError,
    generate,
    marked_modules,
    stale,
    to_sync,
)


def sync(source: str) -> str:
    return to_sync(textwrap.dedent(source))


def test_await_and_the_async_statements_lose_their_keyword():
    assert sync(
        """\
        async def fetch(conn):
            async with conn.cursor() as cur:
                await cur.execute("SELECT 1")
                async for row in cur:
                    yield await (row)
            rows = [r async for r in await conn.rows()]
        """
    ) == textwrap.dedent(
        """\
        def fetch(conn):
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
                for row in cur:
                    yield (row)
            rows = [r for r in conn.rows()]
        """
    )


def test_names_are_renamed_by_the_map_and_the_suffix_rule():
    assert sync(
        """\
        @asynccontextmanager
        async def own_async(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
            await self._finish_async(run_async, conn.__aenter__)
            await asyncio.sleep(1)
            asyncio.get_running_loop()
            run_async_later()
        """
    ) == textwrap.dedent(
        """\
        @contextmanager
        def own(conn: psycopg.Connection[Any]) -> Iterator[None]:
            self._finish(run, conn.__enter__)
            time.sleep(1)
            asyncio.get_running_loop()
            run_async_later()
        """
    )


def test_comments_docstrings_and_fstrings_are_renamed_but_not_plain_strings():
    assert sync(
        '''\
        async def settle_async():
            """Like :func:`run_async`, on an ``AsyncConnection``."""
            # see check_connection_async
            raise E(f"use {ACCEPTED_ASYNC}: run_async", "call run_async (the async method)")
        '''
    ) == textwrap.dedent(
        '''\
        def settle():
            """Like :func:`run`, on an ``Connection``."""
            # see check_connection
            raise E(f"use {ACCEPTED}: run", "call run_async (the async method)")
        '''
    )


def test_an_async_block_becomes_its_else_branch_or_nothing():
    assert sync(
        """\
        async def f(conn):
            if True:  # ASYNC
                from sqlalchemy.ext.asyncio import AsyncSession
            else:
                from sqlalchemy.orm import Session  # noqa: F401
            if True:  # ASYNC  # noqa: SIM108
                x = await conn.get_raw_connection()
            else:
                # sync only
                x = conn.connection
                if x:
                    x.check()
            if True:  # ASYNC
                await asyncio.sleep(0)
            if True:  # ASYNC
                pass
            elif x == "django":
                x = 2
            else:
                x = 3
            if True:
                keep()
            return x
        """
    ) == textwrap.dedent(
        """\
        def f(conn):
            from sqlalchemy.orm import Session
            # sync only
            x = conn.connection
            if x:
                x.check()
            if x == "django":
                x = 2
            else:
                x = 3
            if True:
                keep()
            return x
        """
    )


def test_an_fstring_is_renamed_whole_on_every_python():
    # 3.12 splits an f-string into tokens, 3.11 does not: the twin is the same on both.
    assert sync(
        """\
        async def f(x):
            return f"{x['run_async']} run_async", "run_async"
        """
    ) == textwrap.dedent(
        """\
        def f(x):
            return f"{x['run']} run", "run_async"
        """
    )


def test_an_await_inside_an_fstring_is_refused():
    with pytest.raises(TwinError, match="an await inside an f-string"):
        sync(
            """\
            async def f(x):
                return f"{await x}"
            """
        )


def test_an_async_source_that_does_not_parse_is_named():
    with pytest.raises(TwinError, match=r"sample\.py:3: async source does not parse"):
        to_sync("async def f(:\n", "sample.py:3")


def module(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "sample.py"
    path.write_text(textwrap.dedent(body))
    return path


SAMPLE = f"""\
import asyncio
import time


{SOURCE_MARK}
async def wait_async(seconds: float) -> None:
    \"\"\"Sleep ``seconds`` (see :func:`wait_async`).\"\"\"
    await asyncio.sleep(seconds)


{GENERATED_MARK}
{END_MARK}


class Waiter:
    {SOURCE_MARK}
    async def wait_async(self) -> None:
        await wait_async(0)

    {GENERATED_MARK}
    {END_MARK}
"""


def test_generate_writes_each_twin_after_its_source_formatted(tmp_path):
    path = module(tmp_path, SAMPLE)
    text = generate(path)
    assert (
        f'''{GENERATED_MARK}


def wait(seconds: float) -> None:
    """Sleep ``seconds`` (see :func:`wait`)."""
    time.sleep(seconds)


{END_MARK}
'''
        in text
    )
    assert (
        f"""    {GENERATED_MARK}

    def wait(self) -> None:
        wait(0)

    {END_MARK}
"""
        in text
    )
    path.write_text(text)
    assert generate(path) == text  # written once, current from then on
    assert stale([path]) == []


def test_marks_out_of_order_are_refused(tmp_path):
    path = module(tmp_path, f"{SOURCE_MARK}\nasync def f(): ...\n{END_MARK}\n{GENERATED_MARK}\n")
    with pytest.raises(TwinError, match="sync-twin marks out of order"):
        generate(path)


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scripts.async_to_sync", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_check_names_a_module_whose_twin_was_edited_by_hand(tmp_path):
    path = module(tmp_path, SAMPLE)
    assert run_script(str(path)).returncode == 0
    assert run_script("--check", str(path)).returncode == 0
    current = path.read_text()
    path.write_text(current.replace("    time.sleep(seconds)", "    time.sleep(seconds + 1)"))
    done = run_script("--check", str(path))
    assert done.returncode == 1
    assert f"{path}: its sync twins are stale" in done.stderr
    assert "make sync-twins" in done.stderr
    assert "Traceback" not in done.stderr
    assert run_script(str(path)).returncode == 0  # written anew
    assert path.read_text() == current


def test_check_names_a_module_whose_source_changed(tmp_path):
    path = module(tmp_path, SAMPLE)
    run_script(str(path))
    path.write_text(path.read_text().replace("await asyncio.sleep(seconds)", "pass"))
    assert stale([path]) == [path]


def test_bad_input_gets_one_line():
    done = run_script("--check", "no/such/module.py")
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0
    assert "cannot read" in done.stderr and "module.py" in done.stderr


def test_the_twins_are_found_where_they_are():
    found = {path.relative_to(ROOT).as_posix() for path in marked_modules()}
    assert {
        "pgqueue/db/plan.py",
        "pgqueue/db/connections.py",
        "pgqueue/handler/job_transaction.py",
    } <= found


def test_the_checked_in_sync_twins_are_current():
    """What ``make lint`` checks: a generated twin edited by hand, or an async source changed
    without ``make sync-twins``, fails here."""
    behind = [async_to_sync.shown(path) for path in stale(marked_modules())]
    assert behind == [], f"stale sync twins in {behind}: run `make sync-twins`"
