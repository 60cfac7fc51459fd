"""The dashboard's HTTP surface: state JSON, authentication, CSRF, read-only mode."""

from __future__ import annotations

import base64
import json
import re

from typer.testing import CliRunner

from pgqueue.cli import app
from tests.dashboard_helpers import dashboard


def csrf_of(board, headers=None):
    status, response_headers, html = board.request("/", headers=headers or {})
    assert status == 200
    token = re.search(r'name="csrf-token" content="([^"]+)"', html).group(1)
    assert f"pgq_csrf={token}" in response_headers["set-cookie"]
    assert "HttpOnly" in response_headers["set-cookie"]
    return token


def post(board, action, body, token, extra=None):
    headers = {"Cookie": f"pgq_csrf={token}", "X-CSRF-Token": token, **(extra or {})}
    return board.request(f"/api/{action}", method="POST", body=body, headers=headers)


def test_state_json_matches_the_views_and_actions_need_a_csrf_token(dsn, pgq, conn):
    job = pgq.enqueue("t", queue="emails")
    pgq.enqueue("t", queue="emails", delay=600)
    with dashboard(dsn) as board:  # loopback: no auth needed
        status, _, body = board.request("/api/state")
        state = json.loads(body)
        assert status == 200 and state["read_only"] is False
        [emails] = state["queues"]
        assert (emails["queue"], emails["ready"], emails["scheduled"]) == ("emails", 1, 1)
        assert [w["id"] for w in state["waiting"]] == [job + 1]

        token = csrf_of(board)
        # No token, a wrong token, a token only in the header, a cross-site origin: refused.
        assert board.request("/api/pause", method="POST", body={"queue": "emails"})[0] == 403
        wrong = {"Cookie": f"pgq_csrf={token}", "X-CSRF-Token": "forged"}
        assert (
            board.request("/api/pause", method="POST", body={"queue": "emails"}, headers=wrong)[0]
            == 403
        )
        assert (
            board.request(
                "/api/pause",
                method="POST",
                body={"queue": "emails"},
                headers={"X-CSRF-Token": token},
            )[0]
            == 403
        )
        evil = {"Origin": "http://evil.example"}
        assert post(board, "pause", {"queue": "emails"}, token, evil)[0] == 403
        assert not conn.execute("SELECT count(*) FROM pgqueue.queues").fetchone()[0]
        # GET cannot change anything either.
        assert board.request("/api/pause")[0] == 405

        origin = {"Origin": board.url}
        assert post(board, "pause", {"queue": "emails"}, token, origin)[0] == 200
        assert conn.execute("SELECT paused FROM pgqueue.queues").fetchone() == (True,)
        assert post(board, "resume", {"queue": "emails"}, token)[0] == 200
        assert conn.execute("SELECT paused FROM pgqueue.queues").fetchone() == (False,)
        status, _, body = post(board, "retry", {"id": job + 1}, token)
        assert status == 200 and json.loads(body) == {"ready": [job + 1], "replayed": []}
        status, _, body = post(board, "cancel", {"id": job}, token)
        assert json.loads(body) == {"result": "cancelled"}
        assert post(board, "cancel", {"id": "1; DROP TABLE"}, token)[0] == 400
        assert post(board, "explode", {}, token)[0] == 404


def test_read_only_mode_shows_but_refuses_actions(dsn, pgq, conn):
    pgq.enqueue("t", queue="emails")
    with dashboard(dsn, "--read-only") as board:
        token = csrf_of(board)
        assert json.loads(board.request("/api/state")[2])["read_only"] is True
        assert post(board, "pause", {"queue": "emails"}, token)[0] == 403
        assert conn.execute("SELECT count(*) FROM pgqueue.queues").fetchone() == (0,)


def test_token_auth(dsn):
    with dashboard(dsn, "--token", "s3cret-token") as board:
        assert board.request("/api/state")[0] == 401
        assert board.request("/")[0] == 401
        assert board.request("/api/state", headers={"Authorization": "Bearer nope"})[0] == 401
        bearer = {"Authorization": "Bearer s3cret-token"}
        assert board.request("/api/state", headers=bearer)[0] == 200
        # Opening /?token=... once trades it for an HttpOnly cookie and a clean URL.
        status, headers, _ = board.request("/?token=s3cret-token")
        assert status == 303 and headers["location"] == "/"
        assert "pgq_token=s3cret-token" in headers["set-cookie"]
        assert "HttpOnly" in headers["set-cookie"] and "SameSite=strict" in headers["set-cookie"]
        cookie = {"Cookie": "pgq_token=s3cret-token"}
        assert board.request("/api/state", headers=cookie)[0] == 200
        assert board.request("/healthz")[0] == 200  # for load balancers; says nothing


def test_basic_auth(dsn):
    with dashboard(dsn, "--basic-auth", "ops:pa55:word") as board:
        status, headers, _ = board.request("/api/state")
        assert status == 401 and headers["www-authenticate"].startswith("Basic")

        def basic(user_password: str) -> dict[str, str]:
            return {"Authorization": "Basic " + base64.b64encode(user_password.encode()).decode()}

        assert board.request("/api/state", headers=basic("ops:wrong"))[0] == 401
        assert board.request("/api/state", headers=basic("ops:pa55:word"))[0] == 200


def test_refuses_to_serve_beyond_localhost_without_auth(dsn):
    result = CliRunner().invoke(app, ["dashboard", "--host", "0.0.0.0", "--dsn", dsn])
    assert result.exit_code == 1
    assert "without authentication" in result.output
