"""The dashboard's HTTP application (Starlette): one page, JSON endpoints, actions.

The page (``static/index.html`` + ``app.js``, no CDN) polls ``GET /api/state`` every couple of
seconds and draws its tables and SVG charts itself; its search (``#/search``) reads
``GET /api/search`` a page at a time and its job page (``#/jobs/ID``) ``GET /api/jobs/ID``.
Actions are ``POST /api/<action>`` with a JSON body, authenticated and CSRF-checked
(:mod:`pgqueue.dashboard.security`), refused in read-only mode. Every request first passes the
Host allow-list, and every response carries the security headers (CSP, no framing, nosniff, no
referrer). Every number comes from the documented views, through :mod:`pgqueue.db.views`, and
every action from the same functions the CLI calls.
"""

from __future__ import annotations

import html
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from pgqueue.client import PgQueue
from pgqueue.dashboard.security import (
    CSRF_COOKIE,
    LOOPBACK_HOSTS,
    OPEN_PATHS,
    TOKEN_COOKIE,
    Auth,
    HostCheck,
    SecurityHeaders,
    csrf_refusal,
    new_csrf_token,
)
from pgqueue.db import durable, horizon, ops, search, views
from pgqueue.errors import PgQueueError, SearchTimeoutError
from pgqueue.rules.vocabulary import JOB_STATES

STATIC = resources.files("pgqueue.dashboard") / "static"
NO_STORE = {"Cache-Control": "no-store"}


@dataclass
class DashboardSettings:
    auth: Auth = field(default_factory=Auth)
    read_only: bool = False
    # Served over HTTPS (behind a proxy): Secure cookies, and the page's Origin is https://.
    secure_cookies: bool = False
    limit: int = 50  # rows per table
    # The Host names (or *.domain patterns) the dashboard answers to, as
    # pgqueue.dashboard.security.allowed_host spells them; anything else gets 400.
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS


class _Json(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json.dumps(content, default=views.json_default).encode()


def page_state(reads: PgQueue, settings: DashboardSettings) -> dict[str, Any]:
    """What the overview page shows (``/api/state``), read through ``reads``."""
    dead = reads.admin.dead_letters(limit=settings.limit)
    for row in dead:
        last = row.pop("errors")[-1:] or [{}]
        row["error_class"] = last[0].get("error")
        row["traceback"] = last[0].get("traceback")
    return {
        "read_only": settings.read_only,
        # The page's windows (rates, the throughput chart's hour) end here. The database's
        # clock, not this host's: the rows it is compared with were stamped by the database.
        "now": views.database_now(reads),
        "queues": views.queue_stats(reads),
        "running": views.running_jobs(reads, settings.limit),
        "waiting": views.jobs(reads, state="scheduled", limit=settings.limit),
        "workers": views.workers(reads),
        "dead": dead,
        "failures": views.recent_failures(reads),
        "throughput": views.throughput(reads),
        # What holds back VACUUM, and pgqueue's tables' dead rows and sizes.
        "horizon": horizon.horizon(reads).as_dict(),
    }


def create_app(
    pgq: PgQueue, config: DashboardSettings | None = None, *, reader: PgQueue | None = None
) -> Starlette:
    """The dashboard as an ASGI app. Its pages read through ``reader`` (a client on a
    streaming replica) when given, else through ``pgq``; its actions always write through
    ``pgq``."""
    settings = config or DashboardSettings()
    reads = reader or pgq
    # The job states the search form offers come from the vocabulary, not the page.
    page = (
        (STATIC / "index.html")
        .read_text(encoding="utf-8")
        .replace("{{state_options}}", "".join(map(_option, JOB_STATES)))
    )

    async def index(request: Request) -> Response:
        csrf = request.cookies.get(CSRF_COOKIE) or new_csrf_token()
        html = page.replace("{{csrf}}", csrf).replace(
            "{{read_only}}", "true" if settings.read_only else "false"
        )
        response = HTMLResponse(html, headers=NO_STORE)
        _cookie(response, CSRF_COOKIE, csrf)
        return response

    def _cookie(response: Response, name: str, value: str) -> None:
        response.set_cookie(
            name, value, httponly=True, samesite="strict", secure=settings.secure_cookies
        )

    async def state(request: Request) -> Response:
        # Dead letters' args and tracebacks: not for any cache.
        return _Json(await run_in_threadpool(page_state, reads, settings), headers=NO_STORE)

    def run_search(params: Any) -> dict[str, Any]:
        page = views.search_jobs(reads, **_search_arguments(params))
        return {"jobs": page.jobs, "cursor": page.cursor}

    async def search_jobs(request: Request) -> Response:
        try:
            result = await run_in_threadpool(run_search, request.query_params)
        except SearchTimeoutError as exc:
            return PlainTextResponse(str(exc), status_code=504, headers=NO_STORE)
        except (ValueError, PgQueueError) as exc:
            return PlainTextResponse(str(exc), status_code=400, headers=NO_STORE)
        return _Json(result, headers=NO_STORE)

    async def job(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        try:
            detail = await run_in_threadpool(durable.job_detail, reads, job_id)
        except PgQueueError as exc:
            return PlainTextResponse(str(exc), status_code=400, headers=NO_STORE)
        if detail is None:
            return PlainTextResponse(
                f"job {job_id} not found (never existed, or finished without a record)",
                status_code=404,
                headers=NO_STORE,
            )
        return _Json(detail, headers=NO_STORE)

    actions: dict[str, Callable[[dict[str, Any]], Any]] = {
        "replay": lambda body: {"replayed": pgq.admin.replay_dead_letters(ids=[_id(body)])},
        "cancel": lambda body: {"result": pgq.cancel(_id(body))},
        "retry": lambda body: _retried(ops.retry(pgq, [_id(body)])),
        "pause": lambda body: _set_paused(pgq, _queue(body), True),
        "resume": lambda body: _set_paused(pgq, _queue(body), False),
    }

    async def action(request: Request) -> Response:
        name = request.path_params["action"]
        if name not in actions:
            return PlainTextResponse("unknown action", status_code=404)
        if settings.read_only:
            return PlainTextResponse("the dashboard is read-only", status_code=403)
        refusal = csrf_refusal(request, https=settings.secure_cookies)
        if refusal is not None:
            return PlainTextResponse(refusal, status_code=403)
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("expected a JSON object")
            result = await run_in_threadpool(actions[name], body)
        except (ValueError, PgQueueError) as exc:
            return PlainTextResponse(str(exc), status_code=400)
        return _Json(result)

    async def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    def unauthorized(message: str) -> Response:
        headers = {}
        if settings.auth.username is not None:
            headers["WWW-Authenticate"] = 'Basic realm="pgqueue", charset="UTF-8"'
        return PlainTextResponse(message, status_code=401, headers=headers)

    def login(request: Request) -> Response:
        # Trade the token in the URL for an HttpOnly session cookie, and send the browser to a
        # URL without it, so that it stays in no address bar, bookmark or Referer.
        if not settings.auth.token_matches(request.query_params["token"]):
            return unauthorized("invalid token")
        response = RedirectResponse("/", status_code=303, headers=NO_STORE)
        _cookie(response, TOKEN_COOKIE, request.query_params["token"])
        return response

    class AuthMiddleware(BaseHTTPMiddleware):
        async def dispatch(
            self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
        ) -> Response:
            if request.url.path in OPEN_PATHS:
                return await call_next(request)
            if settings.auth.token is not None and "token" in request.query_params:
                # A URL carrying the token is accepted by the login and nowhere else, even with
                # other valid credentials: nothing should come to rely on putting it in URLs.
                if request.method == "GET" and request.url.path == "/":
                    return login(request)
                return unauthorized(
                    "the token is accepted in a URL only to log in (GET /?token=...); "
                    "send it in an Authorization: Bearer header"
                )
            if settings.auth.check(request):
                return await call_next(request)
            return unauthorized("authentication required")

    return Starlette(
        routes=[
            Route("/", index),
            Route("/healthz", health),
            Route("/api/state", state),
            Route("/api/search", search_jobs),
            Route("/api/jobs/{job_id:int}", job),
            Route("/api/{action}", action, methods=["POST"]),
            Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
        ],
        # Outermost first: headers on every response (the Host refusal included), then the Host
        # allow-list before anything else looks at the request.
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(HostCheck, allowed_hosts=settings.allowed_hosts),
            Middleware(AuthMiddleware),
        ],
    )


_TEXT_FILTERS = ("task", "queue", "error")
_TIME_FILTERS = ("since", "until", "finished_since", "finished_until")
# Query parameter -> argument: each may repeat (one value per state or tag).
_REPEATED_FILTERS = {"state": "state", "tag": "tags"}
# KEY=VALUE pairs the job's args or metadata must contain.
_CONTAINS_FILTERS = ("args", "meta")


def _search_arguments(params: Any) -> dict[str, Any]:
    """``GET /api/search`` query parameters as :func:`pgqueue.views.search_jobs` arguments:
    ``state``, ``tag``, ``args`` and ``meta`` (``KEY=VALUE``) may repeat, times are ISO 8601,
    empty means unset."""
    arguments: dict[str, Any] = {name: params[name] for name in _TEXT_FILTERS if params.get(name)}
    for name in _TIME_FILTERS:
        if params.get(name):
            arguments[name] = search.parse_time(params[name])
    for name in ("id", "limit"):
        if params.get(name):
            try:
                arguments[name] = int(params[name])
            except ValueError:
                raise ValueError(f"{name} must be an integer, got {params[name]!r}") from None
    for param, name in _REPEATED_FILTERS.items():
        values = [value for value in params.getlist(param) if value]
        if values:
            arguments[name] = values
    for name in _CONTAINS_FILTERS:
        contains = search.parse_args_filter(value for value in params.getlist(name) if value)
        if contains is not None:
            arguments[name] = contains
    if params.get("after"):
        arguments["after"] = params["after"]
    return arguments


def _id(body: dict[str, Any]) -> int:
    value = body.get("id")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError("'id' must be a job id (an integer)")
    return value


def _queue(body: dict[str, Any]) -> str:
    value = body.get("queue")
    if not isinstance(value, str):
        raise ValueError("'queue' must be a queue name")
    return value


def _retried(result: ops.RetryResult) -> dict[str, Any]:
    return {"ready": result.made_ready, "replayed": result.replayed}


def _set_paused(pgq: PgQueue, queue: str, paused: bool) -> dict[str, Any]:
    if paused:
        pgq.flow.pause_queue(queue)
    else:
        pgq.flow.resume_queue(queue)
    return {"queue": queue, "paused": paused}


def _option(value: str) -> str:
    return f'<option value="{html.escape(value)}">{html.escape(value)}</option>'
