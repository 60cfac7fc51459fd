"""Named SQL queries, loaded from ``queries.sql``.

Every DML statement the runtime runs lives in that one file under a ``-- name: <name>`` header,
so the SQL can be read, reviewed and EXPLAINed as a whole. Parameters use psycopg's
``%(name)s`` placeholders; values are always bound, never formatted into the text.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*(?P<name>[a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def parse(text: str) -> dict[str, str]:
    """Split a named-query file into ``{name: sql}``; names must be unique."""
    queries: dict[str, str] = {}
    matches = list(_HEADER.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip()
        lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
        sql = "\n".join(lines).strip().rstrip(";").strip()
        name = match.group("name")
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        if not sql:
            raise ValueError(f"query {name!r} is empty")
        queries[name] = sql
    return queries


@cache
def all_queries() -> dict[str, str]:
    text = resources.files("pgqueue.db").joinpath("queries.sql").read_text(encoding="utf-8")
    return parse(text)


def query(name: str) -> str:
    """The SQL of the named query (KeyError names the missing query)."""
    try:
        return all_queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in pgqueue/db/queries.sql") from None
