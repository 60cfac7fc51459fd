"""pgqueue is typed for Django users too: ``mypy --strict`` with django-stubs' mypy plugin (the
usual Django set-up) checks a user's project (tests/typing/django_project: models, tasks on
``queue()``, a batch task, a view enqueueing in ``atomic()``, the admin's models) with no
internal error and no error, and still reports a wrong task argument.

mypy runs in a subprocess from a directory outside the repository, as in test_typing.py, with
the project's own ``mypy.ini`` naming the plugin and the project's settings.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_typing import MARKER, MYPY_ERROR

PROJECT = Path(__file__).resolve().parents[1] / "typing" / "django_project"
WRONG = "shop/wrong.py"

MYPY_INI = """
[mypy]
strict = True
plugins = mypy_django_plugin.main

[mypy.plugins.django-stubs]
django_settings_module = settings
"""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("typing-django") / "project"
    shutil.copytree(PROJECT, work)
    (work / "mypy.ini").write_text(MYPY_INI.lstrip())
    return work


def _mypy(project: Path, *targets: str) -> subprocess.CompletedProcess[str]:
    # The plugin imports the settings: the project is on the path, pgqueue's sources are not.
    env = {k: v for k, v in os.environ.items() if k not in {"MYPYPATH", "PYTHONPATH"}}
    env["PYTHONPATH"] = str(project)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--no-color-output", "--no-pretty", "--show-traceback",
         "--cache-dir", str(project / ".mypy_cache"), *targets],
        cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_mypy_strict_with_the_django_plugin_accepts_a_django_project(project: Path) -> None:
    done = _mypy(project, "settings.py", "shop/models.py", "shop/tasks.py", "shop/views.py")
    output = done.stdout + done.stderr
    assert "INTERNAL ERROR" not in output, output
    assert done.returncode == 0, output
    assert "Success: no issues found in 4 source files" in done.stdout


def test_tasks_keep_their_types_under_the_plugin(project: Path) -> None:
    done = _mypy(project, WRONG)
    assert "INTERNAL ERROR" not in done.stdout + done.stderr
    lines = (PROJECT / WRONG).read_text().splitlines()
    expected = {
        (WRONG, number, match.group(1))
        for number, text in enumerate(lines, start=1)
        if (match := MARKER.search(text))
    }
    found = {(m["file"], int(m["line"]), m["code"]) for m in MYPY_ERROR.finditer(done.stdout)}
    assert expected and found == expected, done.stdout
