"""Tasks of a plain Python program; run them with ``pgq work tasks:pgq``."""

from pgqueue import PgQueue

pgq = PgQueue()  # $PGQUEUE_DSN, else $DATABASE_URL, else the embedded server


@pgq.task(result_ttl=600)
def add(a: int, b: int) -> int:
    return a + b
