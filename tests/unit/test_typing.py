"""pgqueue is typed for its users: ``mypy --strict`` and pyright (strict) accept a user's module
(tests/typing/user_app.py) and report wrong task arguments (tests/typing/wrong_arguments.py).

Both checkers run in a subprocess from a directory outside the repository, so they find pgqueue
as an installed package, as a user's project does: without ``pgqueue/py.typed`` mypy reports
``import-untyped`` and ``@pgq.task`` becomes an untyped decorator, failing the first test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SAMPLES = Path(__file__).resolve().parents[1] / "typing"
GOOD = "user_app.py"
BAD = "wrong_arguments.py"
# A line of a sample that must get this mypy error code: `...  # error: arg-type`.
MARKER = re.compile(r"#\s*error:\s*([a-z-]+)\s*$")
MYPY_ERROR = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$", re.M)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The samples in a directory of their own (no project config, pgqueue not importable from
    the working directory), with a pyright config asking for strict mode."""
    work = tmp_path_factory.mktemp("typing")
    for name in (GOOD, BAD):
        shutil.copy(SAMPLES / name, work / name)
    (work / "pyrightconfig.json").write_text(json.dumps({"typeCheckingMode": "strict"}))
    return work


def _env() -> dict[str, str]:
    # Nothing from the caller's environment may point either checker at the sources.
    return {k: v for k, v in os.environ.items() if k not in {"MYPYPATH", "PYTHONPATH"}}


def _expected(name: str) -> set[tuple[int, str]]:
    """(line, mypy error code) for every marked line of a sample."""
    lines = (SAMPLES / name).read_text().splitlines()
    return {
        (number, match.group(1))
        for number, text in enumerate(lines, start=1)
        if (match := MARKER.search(text))
    }


def _mypy(workdir: Path, name: str) -> subprocess.CompletedProcess[str]:
    # One cache for the module: the second run reuses what the first learnt of pgqueue.
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-color-output",
            "--no-pretty",
            "--cache-dir",
            str(workdir / ".mypy_cache"),
            name,
        ],
        cwd=workdir,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )


@pytest.fixture(scope="module")
def pyright(workdir: Path) -> dict[str, list[dict[str, Any]]]:
    """Pyright's diagnostics for both samples (one run: it starts slowly), by file name."""
    # --outputjson: machine-readable, and the pyright package then skips its online version
    # check and runs the pyright bundled in its wheel on the machine's node.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyright",
            "--outputjson",
            "--pythonpath",
            sys.executable,
            GOOD,
            BAD,
        ],
        cwd=workdir,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert done.stdout.startswith("{"), f"pyright did not run:\n{done.stdout}\n{done.stderr}"
    by_file: dict[str, list[dict[str, Any]]] = {GOOD: [], BAD: []}
    for diagnostic in json.loads(done.stdout)["generalDiagnostics"]:
        by_file.setdefault(Path(diagnostic["file"]).name, []).append(diagnostic)
    return by_file


def test_samples_mark_errors() -> None:
    assert not _expected(GOOD)
    assert len(_expected(BAD)) >= 5


def test_mypy_strict_accepts_a_user_module(workdir: Path) -> None:
    done = _mypy(workdir, GOOD)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found in 1 source file" in done.stdout


def test_mypy_strict_reports_wrong_task_arguments(workdir: Path) -> None:
    done = _mypy(workdir, BAD)
    assert done.returncode == 1, done.stdout + done.stderr
    found = {(m["file"], int(m["line"]), m["code"]) for m in MYPY_ERROR.finditer(done.stdout)}
    assert found == {(BAD, line, code) for line, code in _expected(BAD)}, done.stdout


def test_pyright_strict_accepts_a_user_module(pyright: dict[str, list[dict[str, Any]]]) -> None:
    assert pyright[GOOD] == [], json.dumps(pyright[GOOD], indent=1)


def test_pyright_reports_wrong_task_arguments(pyright: dict[str, list[dict[str, Any]]]) -> None:
    errors = {
        (int(d["range"]["start"]["line"]) + 1, str(d["message"]))
        for d in pyright[BAD]
        if d["severity"] == "error"
    }
    assert {line for line, _ in errors} == {line for line, _ in _expected(BAD)}, sorted(errors)
