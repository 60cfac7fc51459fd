"""Failed connects sorted by what the server said: for good (rejected) or for now (unavailable),
named by server and database, never with the password."""

from __future__ import annotations

import psycopg
import pytest

from pgqueue.db.connect_errors import connection_error, server_of
from pgqueue.errors import DatabaseRejectedError, DatabaseUnavailableError

DSN = "postgresql://app:s3cret@db.internal:6432/shop"
SERVER = 'connection failed: connection to server at "10.0.0.5", port 6432 failed: FATAL:  '


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (SERVER + 'password authentication failed for user "app"', "password authentication"),
        (SERVER + 'database "shop" does not exist', "database does not exist"),
        (SERVER + 'role "app" does not exist', "role does not exist"),
        (SERVER + 'no pg_hba.conf entry for host "10.0.0.9", user "app"', "pg_hba.conf"),
        (SERVER + 'role "app" is not permitted to log in', "may not log in"),
        ("connection failed: fe_sendauth: no password supplied", "has none"),
    ],
)
def test_rejections_are_for_good(text, problem):
    error = connection_error(psycopg.OperationalError(text), DSN)
    assert isinstance(error, DatabaseRejectedError)
    assert problem in str(error)
    assert "s3cret" not in str(error)
    assert error.server == "server db.internal:6432, database shop"


@pytest.mark.parametrize(
    "text",
    [
        'connection failed: connection to server at "10.0.0.5", port 6432 failed: Connection '
        "refused\n\tIs the server running on that host and accepting TCP/IP connections?",
        "failed to resolve host 'db.internal': [Errno -2] Name or service not known",
        "connection timeout expired",
        SERVER + "the database system is starting up",
        SERVER + "sorry, too many clients already",
    ],
)
def test_outages_are_for_now(text):
    error = connection_error(psycopg.OperationalError(text), DSN)
    assert isinstance(error, DatabaseUnavailableError)
    assert "\n" not in str(error)


def test_server_of_a_socket_dsn_and_keyword_dsn():
    assert server_of("host=/run/pg port=5433 dbname=app") == (
        "server socket in /run/pg, port 5433, database app"
    )
    assert "password" not in server_of("host=h dbname=d password=p")
