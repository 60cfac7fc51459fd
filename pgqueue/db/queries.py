"""Named SQL queries, loaded from the files in ``pgqueue/db/queries/``.

Every DML statement the runtime runs lives in one of those files, one per domain (``enqueue.sql``,
``claim.sql``, ``complete.sql``, ...), under a ``-- name: <name>`` header, so the SQL can be read,
reviewed and EXPLAINed by itself. Names are unique across the files. SQL that several statements
of one file share is written once, as a ``-- fragment: <name>`` they include with ``{{name}}``;
the job input's column lists are generated fragments (:mod:`pgqueue.db.job_rows`).
Parameters use psycopg's ``%(name)s`` placeholders; values are always bound, never formatted into
the text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources

from pgqueue.db.job_rows import FRAGMENTS

_HEADER = re.compile(
    r"^--\s*(?P<kind>name|fragment):\s*(?P<name>[a-z_][a-z0-9_]*)\s*$", re.MULTILINE
)
_USE = re.compile(r"\{\{(?P<name>[a-z_][a-z0-9_]*)\}\}")


def parse(text: str, generated: Mapping[str, str] | None = None) -> dict[str, str]:
    """Split a named-query file into ``{name: sql}``; names must be unique.

    A ``-- fragment: <name>`` section is a piece of SQL that several queries share (a statement
    and its variant), written once: a query says ``{{name}}`` where it goes. Fragments are not
    queries themselves, and one that no query uses is an error. ``generated`` fragments are
    SQL derived from a declaration in Python (the job input's columns:
    :data:`pgqueue.db.job_rows.FRAGMENTS`), included the same way.
    """
    sections: dict[str, dict[str, str]] = {"name": {}, "fragment": {}}
    matches = list(_HEADER.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end]
        lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
        kind, name = match.group("kind"), match.group("name")
        if name in sections["name"] or name in sections["fragment"]:
            raise ValueError(f"query {name!r} is defined twice")
        # A fragment keeps its indentation: it may continue a statement in the middle.
        sql = "\n".join(lines).strip("\n").rstrip()
        if kind == "name":
            sql = sql.strip().rstrip(";").strip()
        if not sql:
            raise ValueError(f"{kind} {name!r} is empty")
        sections[kind][name] = sql
    fragments = sections["fragment"]
    clash = sorted(set(fragments) & set(generated or {}))
    if clash:
        raise ValueError(f"fragment {clash[0]!r} is also a generated one")
    used: set[str] = set()

    def expand(use: re.Match[str]) -> str:
        name = use.group("name")
        if generated is not None and name in generated:
            return generated[name]
        if name not in fragments:
            raise ValueError(f"{{{{{name}}}}} names no fragment")
        used.add(name)
        return fragments[name]

    queries = {name: _USE.sub(expand, sql) for name, sql in sections["name"].items()}
    unused = sorted(set(fragments) - used)
    if unused:
        raise ValueError(f"fragments no query uses: {', '.join(unused)}")
    return queries


QUERY_DIR = "queries"


@cache
def all_queries() -> dict[str, str]:
    """Every named query of every file in ``pgqueue/db/queries/`` (a name defined in two files
    is an error)."""
    merged: dict[str, str] = {}
    where: dict[str, str] = {}
    folder = resources.files("pgqueue.db").joinpath(QUERY_DIR)
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, sql in parse(entry.read_text(encoding="utf-8"), FRAGMENTS).items():
            if name in merged:
                raise ValueError(f"query {name!r} is defined in {where[name]} and {entry.name}")
            merged[name], where[name] = sql, entry.name
    return merged


def query(name: str) -> str:
    """The SQL of the named query (KeyError names the missing query)."""
    try:
        return all_queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in pgqueue/db/queries/*.sql") from None
