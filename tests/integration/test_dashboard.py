"""The dashboard's HTTP surface: state JSON, authentication, CSRF, read-only mode, and the
defences against other sites: the Host allow-list (DNS rebinding), the Origin check, security
headers, and the token accepted in a URL only to log in."""

from __future__ import annotations

import base64
import json
import re

import pytest
from typer.testing import CliRunner

from pgqueue.cli import app
from pgqueue.rules.vocabulary import JOB_STATES
from tests.dashboard_helpers import dashboard


def csrf_of(board, headers=None):
    status, response_headers, html = board.request("/", headers=headers or {})
    assert status == 200
    token = re.search(r'name="csrf-token" content="([^"]+)"', html).group(1)
    assert f"pgq_csrf={token}" in response_headers["set-cookie"]
    assert "HttpOnly" in response_headers["set-cookie"]
    return token


def post(board, action, body, token, extra=None):
    # What the page's fetch() sends: browsers always send Origin with a POST.
    headers = {
        "Cookie": f"pgq_csrf={token}",
        "X-CSRF-Token": token,
        "Origin": board.url,
        **(extra or {}),
    }
    headers = {k: v for k, v in headers.items() if v is not None}
    return board.request(f"/api/{action}", method="POST", body=body, headers=headers)


def paused(conn):
    return conn.execute("SELECT count(*) FROM pgqueue.queues WHERE paused").fetchone()[0]


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
        assert headers["cache-control"] == "no-store"
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


def test_dns_rebinding_a_foreign_host_is_refused_before_anything_runs(dsn, pgq, conn):
    # The attack: rebind.attacker.example first resolves to the attacker's server, whose page
    # then has it resolve to 127.0.0.1; the page's requests reach the dashboard as same-origin
    # requests with Host and Origin naming the attacker's domain.
    pgq.enqueue("t", queue="emails", args={"card": "4111-1111"})
    with dashboard(dsn) as board:
        evil_host = f"rebind.attacker.example:{board.port}"
        evil = {"Host": evil_host}
        for path in ("/", "/api/state", "/static/app.js", "/api/nope", "/?token=x"):
            status, headers, body = board.request(path, headers=evil)
            assert status == 400, path
            assert "not allowed" in body and "4111" not in body
            assert "set-cookie" not in headers, path  # no CSRF cookie handed out either
        token = csrf_of(board)
        attack = {**evil, "Origin": f"http://{evil_host}"}
        assert post(board, "pause", {"queue": "emails"}, token, attack)[0] == 400
        assert paused(conn) == 0

        # Loopback names are allowed on any port (ssh -L, docker -p: the Host carries the port
        # the browser used, not the one served); look-alikes are not.
        for host in (
            f"localhost:{board.port}",
            f"127.0.0.1:{board.port}",
            f"[::1]:{board.port}",
            "localhost",
            "LocalHost:9000",
            "[::1]",
        ):
            assert board.request("/api/state", headers={"Host": host})[0] == 200, host
        for host in (
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "evil.example@localhost",
            "localhost:80:80",
            "localhost:port",
            "::1",
            "[::2]",
            "127.0.0.2",
            "0.0.0.0",
            "",
        ):
            assert board.request("/api/state", headers={"Host": host})[0] == 400, host
        # No Host at all (HTTP/1.0 allows that): refused too.
        reply = board.raw(b"GET /api/state HTTP/1.0\r\nConnection: close\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 400"), reply[:40]
        # /healthz answers whatever the Host: load balancers and probes address it by IP, and it
        # says only "ok".
        status, _, body = board.request("/healthz", headers=evil)
        assert (status, body) == (200, "ok")


def test_allowed_hosts_extend_the_loopback_names(dsn, tmp_path):
    args = ("--allowed-host", "dash.example.com", "--allowed-host", "*.OPS.example,[::1]")
    with dashboard(dsn, *args, log=tmp_path / "out") as board:
        # It says what it answers to, so that a 400 is easy to explain.
        assert (
            "answering to Host: localhost, 127.0.0.1, [::1], dash.example.com, *.ops.example\n"
            in (tmp_path / "out").read_text()
        )
        for host in (
            "dash.example.com",
            "DASH.example.com:443",
            "a.ops.example",
            "b.a.ops.example",
        ):
            assert board.request("/api/state", headers={"Host": host})[0] == 200, host
        assert board.request("/api/state", headers={"Host": "localhost"})[0] == 200
        for host in ("ops.example", "evil-ops.example", "dash.example.com.evil.example"):
            assert board.request("/api/state", headers={"Host": host})[0] == 400, host
    # The environment variable takes several names (comma or space separated).
    env = {"PGQUEUE_DASHBOARD_ALLOWED_HOSTS": "dash.example.com, 10.1.2.3 [fd00::1]"}
    with dashboard(dsn, env=env) as board:
        for host in ("dash.example.com", "10.1.2.3:8080", "[fd00::1]:8080", "127.0.0.1"):
            assert board.request("/api/state", headers={"Host": host})[0] == 200, host
        assert board.request("/api/state", headers={"Host": "other.example"})[0] == 400
    # A concrete bind address is allowed without being named again...
    with dashboard(dsn, bind="127.0.0.2") as board:
        assert board.request("/api/state")[0] == 200  # Host: 127.0.0.2:PORT
        assert board.request("/api/state", headers={"Host": "127.0.0.3"})[0] == 400
    # ...a wildcard one is not a name anyone should browse to.
    with dashboard(dsn, "--token", "t", bind="0.0.0.0") as board:
        bearer = {"Authorization": "Bearer t"}
        assert board.request("/api/state", headers=bearer)[0] == 200
        assert board.request("/api/state", headers={**bearer, "Host": "0.0.0.0"})[0] == 400


@pytest.mark.parametrize(
    "value",
    ["*", "", "dash.example.com:8080", "http://dash.example.com", "a b", "*.", "ev*l.example"],
)
def test_a_bad_allowed_host_is_a_one_line_usage_error(dsn, value):
    result = CliRunner().invoke(app, ["dashboard", "--allowed-host", value, "--dsn", dsn])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --allowed-host"), result.output


def test_actions_need_the_origin_of_the_allowed_host_the_browser_used(dsn, pgq, conn):
    pgq.enqueue("t", queue="emails")
    with dashboard(dsn) as board:
        token = csrf_of(board)
        port = board.port
        for origin in (
            None,  # a POST without Origin did not come from the page
            "null",
            "http://evil.example",
            f"http://rebind.attacker.example:{port}",
            f"http://localhost:{port}",  # not the Host this request was sent to
            f"http://127.0.0.1:{port + 1}",  # another local service's page
            f"https://127.0.0.1:{port}",  # another scheme
            f"http://127.0.0.1:{port}.evil.example",
            f"http://127.0.0.1:{port}/",
            f"http://user@127.0.0.1:{port}",
        ):
            status, _, body = post(board, "pause", {"queue": "emails"}, token, {"Origin": origin})
            assert status == 403 and "Origin" in body, origin
        assert paused(conn) == 0
        # Each allowed name is its own origin: the Origin must be that of the Host in use.
        for host in (f"localhost:{port}", f"[::1]:{port}", "localhost"):
            extra = {"Host": host, "Origin": f"http://{host}"}
            assert post(board, "pause", {"queue": "emails"}, token, extra)[0] == 200, host
            assert post(board, "resume", {"queue": "emails"}, token, extra)[0] == 200, host
        # A default port is the same origin written with or without it.
        extra = {"Host": "localhost:80", "Origin": "http://localhost"}
        assert post(board, "pause", {"queue": "emails"}, token, extra)[0] == 200
        assert paused(conn) == 1
    # Behind an HTTPS proxy (--secure-cookies) the page's origin is https://.
    with dashboard(dsn, "--secure-cookies") as board:
        token = csrf_of(board)
        status, _, body = post(board, "resume", {"queue": "emails"}, token)
        assert status == 403 and "--secure-cookies" in body
        https = {"Origin": board.url.replace("http://", "https://")}
        assert post(board, "resume", {"queue": "emails"}, token, https)[0] == 200
        assert paused(conn) == 0


def directives(csp: str) -> dict[str, list[str]]:
    parsed = {}
    for directive in filter(None, (d.strip() for d in csp.split(";"))):
        name, *values = directive.split()
        parsed[name] = values
    return parsed


def test_every_response_carries_the_security_headers(dsn):
    with dashboard(dsn, "--token", "t") as board:
        bearer = {"Authorization": "Bearer t"}
        token = csrf_of(board, bearer)
        responses = {
            "page": board.request("/", headers=bearer),
            "state": board.request("/api/state", headers=bearer),
            "script": board.request("/static/app.js", headers=bearer),
            "missing file": board.request("/static/nope.js", headers=bearer),
            "login": board.request("/?token=t"),
            "unauthenticated": board.request("/api/state"),
            "csrf refused": board.request("/api/pause", method="POST", body={}, headers=bearer),
            "action": post(board, "resume", {"queue": "q"}, token, bearer),
            "foreign host": board.request("/", headers={"Host": "evil.example"}),
            "health": board.request("/healthz"),
        }
        statuses = {status for status, _, _ in responses.values()}
        assert {200, 303, 400, 401, 403, 404} <= statuses
        for name, (_, headers, _) in responses.items():
            csp = directives(headers["content-security-policy"])
            assert csp["default-src"] == ["'self'"], name
            assert csp["frame-ancestors"] == ["'none'"], name
            for directive in ("script-src", "style-src"):
                assert csp.get(directive, ["'self'"]) == ["'self'"], (name, directive)
            assert csp["object-src"] == ["'none'"] and csp["base-uri"] == ["'none'"], name
            assert headers["x-frame-options"] == "DENY", name
            assert headers["x-content-type-options"] == "nosniff", name
            assert headers["referrer-policy"] == "no-referrer", name
        # Dead letters' args and tracebacks are not kept in caches.
        assert responses["state"][1]["cache-control"] == "no-store"
        # The page works under that policy: no inline script, style or event handler.
        html = responses["page"][2]
        assert not re.search(r"<script(?![^>]*\ssrc=)", html)
        assert not re.search(r"<style|\sstyle=|\son[a-z]+=", html)
        assert re.findall(r'<script src="([^"]+)"', html) == ["/static/app.js"]


def test_the_token_is_accepted_in_a_url_only_to_log_in(dsn, pgq, conn):
    pgq.enqueue("t", queue="emails")
    with dashboard(dsn, "--token", "s3cret-token") as board:
        # Anywhere but the login, a token in the URL (history, proxy logs, Referer) is refused.
        for path in ("/api/state", "/static/app.js", "/nope"):
            status, _, body = board.request(f"{path}?token=s3cret-token")
            assert status == 401 and "Authorization: Bearer" in body, path
        # ...even next to valid credentials, so no script comes to rely on it.
        bearer = {"Authorization": "Bearer s3cret-token"}
        assert board.request("/api/state?token=s3cret-token", headers=bearer)[0] == 401
        token = csrf_of(board, bearer)
        status = board.request(
            "/api/pause?token=s3cret-token",
            method="POST",
            body={"queue": "emails"},
            headers={
                "Cookie": f"pgq_csrf={token}",
                "X-CSRF-Token": token,
                "Origin": board.url,
            },
        )[0]
        assert status == 401 and paused(conn) == 0

        # The login: a wrong token sets nothing.
        status, headers, _ = board.request("/?token=wrong")
        assert status == 401 and "set-cookie" not in headers
        # The right one sets the session cookie and drops the token from the URL, even with
        # other parameters.
        status, headers, _ = board.request("/?token=s3cret-token&tab=dead")
        assert status == 303 and headers["location"] == "/"
        cookie = headers["set-cookie"]
        assert cookie.startswith("pgq_token=s3cret-token;")
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Secure" not in cookie
        assert board.request("/api/state", headers={"Cookie": "pgq_token=s3cret-token"})[0] == 200
        # Logging in is a GET of the page, nothing else.
        assert board.request("/?token=s3cret-token", method="POST", body={})[0] in {401, 405}
    with dashboard(dsn, "--token", "s3cret-token", "--secure-cookies") as board:
        status, headers, _ = board.request("/?token=s3cret-token")
        assert status == 303 and "Secure" in headers["set-cookie"]
    # Without a token to log in with, the parameter means nothing and is not an error.
    with dashboard(dsn, "--basic-auth", "ops:pw") as board:
        basic = {"Authorization": "Basic " + base64.b64encode(b"ops:pw").decode()}
        assert board.request("/?token=x", headers=basic)[0] == 200
        assert board.request("/api/state?token=x", headers=basic)[0] == 200


def test_the_search_form_offers_the_job_states_the_vocabulary_declares(dsn):
    with dashboard(dsn) as board:
        status, _, html = board.request("/")
    assert status == 200
    assert re.findall(r'<option value="([a-z ]*)">', html) == ["", *JOB_STATES]


def test_the_pages_windows_end_at_the_databases_clock_not_the_hosts(pgq, conn, monkeypatch):
    # The rates and the throughput chart count rows the database stamped; a dashboard host
    # whose clock is off by an hour must not shift their windows.
    import datetime as real

    from pgqueue.dashboard import app as dashboard_app

    class SkewedClock(real.datetime):
        @classmethod
        def now(cls, tz: real.tzinfo | None = None) -> SkewedClock:
            return cls.fromtimestamp(real.datetime.now(tz).timestamp() - 3600, tz)

    monkeypatch.setattr(dashboard_app, "datetime", SkewedClock, raising=False)
    monkeypatch.setattr(real, "datetime", SkewedClock)
    state = dashboard_app.page_state(pgq, dashboard_app.DashboardSettings())
    [(db_now,)] = conn.execute("SELECT now()").fetchall()
    assert abs((db_now - state["now"]).total_seconds()) < 60
