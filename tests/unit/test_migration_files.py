"""The function and view files under ``migrations/sql/`` and the revisions that include them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pgqueue.db import migrate
from pgqueue.errors import ConfigurationError

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
INCLUDE = re.compile(r"^\\i (\S+)$", re.MULTILINE)


def included() -> dict[str, list[str]]:
    """Each included file, with the revisions that include it."""
    found: dict[str, list[str]] = {}
    for path in sorted((MIGRATIONS / "versions").glob("*.py")):
        for name in INCLUDE.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, []).append(path.name[:4])
    return found


def test_every_include_names_a_file_and_every_file_is_included():
    files = {p.relative_to(MIGRATIONS / "sql").as_posix() for p in MIGRATIONS.glob("sql/**/*.sql")}
    uses = included()
    assert set(uses) - files == set(), "included but missing"
    assert files - set(uses) == set(), "files no revision includes"


def test_a_file_is_named_after_what_it_defines_and_the_revision_that_made_it():
    """``functions/<name>/<revision>.sql`` creates pgqueue.<name>, and that revision is the
    first to include it (later ones include it only to restore it, in a downgrade)."""
    for name, revisions in included().items():
        kind, obj, file = name.split("/")
        text = (MIGRATIONS / "sql" / name).read_text(encoding="utf-8")
        statement = "FUNCTION" if kind == "functions" else "VIEW"
        creates = re.findall(rf"^CREATE OR REPLACE {statement} pgqueue\.(\w+)", text, re.M)
        assert creates == [obj], name
        assert min(revisions) == file.removesuffix(".sql"), name


def test_includes_are_expanded_and_a_missing_file_is_named():
    text = migrate.sql_script("SELECT 1;\n\\i functions/cancel/0002.sql\nSELECT 2;\n")
    assert "CREATE OR REPLACE FUNCTION pgqueue.cancel(job_id bigint)" in text
    assert text.startswith("SELECT 1;\n") and text.endswith("$$;\nSELECT 2;\n")
    with pytest.raises(ConfigurationError, match=r"functions/nothing/0001\.sql"):
        migrate.sql_script("\\i functions/nothing/0001.sql\n")
