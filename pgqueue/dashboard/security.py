"""Who may use the dashboard, and proof that a request came from the dashboard's own page.

* **Host allow-list** (:class:`HostCheck`): the dashboard answers only to the names it is known
  by: the loopback names, the address it is bound to when that is a concrete one, and the
  operator's ``--allowed-host`` names. This is what defeats DNS rebinding: a page on
  ``rebind.attacker.example`` that has the name re-resolve to 127.0.0.1 reaches the dashboard
  as "same-origin" with ``Host: rebind.attacker.example``, so the page, ``/api/state`` and the
  actions all refuse that Host (400) before anything else runs. Any port is accepted: a
  rebinding page has its own name whatever the port, while port forwarding (``ssh -L``,
  ``docker -p``) and proxies hand the dashboard the port the browser used, not the served one.
* **Authentication**: a bearer token (``Authorization: Bearer``, or the HttpOnly session cookie
  set by the login URL ``GET /?token=...``, the only place a token is accepted in a URL) or HTTP
  basic auth. Required unless the server is bound to a loopback address; checked with
  constant-time comparisons.
* **CSRF**: every state-changing request must be a POST carrying the per-browser token from the
  ``pgq_csrf`` cookie in the ``X-CSRF-Token`` header (a double-submit token a cross-site page
  cannot read), and an ``Origin`` that is the origin of the (allowed) Host it was sent to, with
  the dashboard's scheme: same origin, port included.
* **Headers** (:class:`SecurityHeaders`): every response forbids framing, inline script and
  style, content sniffing and referrers.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

TOKEN_COOKIE = "pgq_token"
CSRF_COOKIE = "pgq_csrf"
CSRF_HEADER = "x-csrf-token"
# Paths that answer whatever the Host: load balancers and container probes address the server
# by IP, and the reply ("ok") tells a rebinding page nothing.
OPEN_PATHS = frozenset({"/healthz"})
# The names a browser on this machine uses to reach a loopback-bound dashboard, spelt as they
# appear in a Host header (an IPv6 address in brackets).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")

# The page loads only its own script, stylesheet and /api/state; nothing inline (app.js sets
# colours through the CSSOM, which style-src does not govern), no plugins, no <base>, and no
# framing (clickjacking the action buttons).
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),  # for browsers that predate frame-ancestors
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    # Other sites cannot even embed /api/state as a no-cors resource (<script>, <img>).
    (b"cross-origin-resource-policy", b"same-origin"),
)

_NAME = r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*"
_NAME_RE = re.compile(_NAME)
_HOST_RE = re.compile(rf"(?P<host>\[[0-9a-f:.]+\]|{_NAME})(?::(?P<port>[0-9]{{1,5}}))?")
_ORIGIN_RE = re.compile(rf"(?P<scheme>https?)://{_HOST_RE.pattern}")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_host(name: str) -> str:
    """An ``--allowed-host`` value as a Host header spells it (lower case, an IPv6 address in
    brackets), or a ``*.example.com`` pattern for every subdomain; ValueError says what is
    wrong with it."""
    value = name.strip().lower()
    if not value:
        raise ValueError("empty")
    if value == "*":
        raise ValueError("would let any site in (DNS rebinding)")
    if "://" in value or "/" in value:
        raise ValueError("a host name, not a URL")
    try:
        address = ipaddress.ip_address(value.removeprefix("[").removesuffix("]"))
    except ValueError:
        pass
    else:
        return f"[{address.compressed}]" if address.version == 6 else address.compressed
    if re.fullmatch(rf"{_NAME}:[0-9]*", value):
        raise ValueError("a name without a port (any port is accepted)")
    if value.startswith("*.") and _NAME_RE.fullmatch(value[2:]):
        return value
    if "*" in value:
        raise ValueError("a wildcard must be a whole first label: *.example.com")
    if not _NAME_RE.fullmatch(value):
        raise ValueError("not a host name or IP address")
    return value


def bind_host(host: str) -> str | None:
    """The name the server is bound to, as a Host names it, or None when it is a wildcard
    (0.0.0.0, ::), which no browser should be told to use."""
    try:
        if ipaddress.ip_address(host.strip("[]")).is_unspecified:
            return None
    except ValueError:
        pass
    try:
        return allowed_host(host)
    except ValueError:
        return None  # not something a Host header could carry; uvicorn reports bad binds


def parse_host(value: str | None) -> tuple[str, int | None] | None:
    """A Host header as (lower-case host, port), or None when it is missing or malformed."""
    match = _HOST_RE.fullmatch((value or "").lower())
    if match is None or not _valid_brackets(match["host"]):
        return None
    port = match["port"]
    return match["host"], int(port) if port else None


def _valid_brackets(host: str) -> bool:
    if not host.startswith("["):
        return True
    try:
        ipaddress.IPv6Address(host[1:-1])
    except ValueError:
        return False
    return True


class HostCheck:
    """ASGI middleware: a request whose Host is not on the allow-list gets 400, first thing."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str]) -> None:
        self.app = app
        names = [h.lower() for h in allowed_hosts]  # Host headers are compared in lower case
        self.exact = frozenset(h for h in names if not h.startswith("*."))
        self.suffixes = tuple(h[1:] for h in names if h.startswith("*."))

    def allows(self, host: str) -> bool:
        return host in self.exact or host.endswith(self.suffixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and scope["path"] not in OPEN_PATHS:
            header = Headers(scope=scope).get("host")
            parsed = parse_host(header)
            if parsed is None or not self.allows(parsed[0]):
                shown = (parsed[0] if parsed else repr(header))[:100]
                response = PlainTextResponse(
                    f"Host not allowed: {shown} (to serve the dashboard under this name, "
                    "start it with --allowed-host NAME)",
                    status_code=400,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class SecurityHeaders:
    """ASGI middleware: the security headers on every response, errors included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(k, v) for k, v in SECURITY_HEADERS if k not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


@dataclass(frozen=True)
class Auth:
    token: str | None = None
    username: str | None = None
    password: str | None = None

    @property
    def required(self) -> bool:
        return self.token is not None or self.username is not None

    def token_matches(self, candidate: str | None) -> bool:
        return self.token is not None and bool(candidate) and _same(candidate or "", self.token)

    def check(self, request: Request) -> bool:
        """Credentials from headers or the session cookie; never from the URL (see the login
        in :mod:`pgqueue.dashboard.app`)."""
        if not self.required:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if self.token is not None:
            for candidate in (
                value if scheme.lower() == "bearer" else None,
                request.cookies.get(TOKEN_COOKIE),
            ):
                if self.token_matches(candidate):
                    return True
        if self.username is not None and scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(value).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            return _same(user, self.username) & _same(password, self.password or "")
        return False


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_refusal(request: Request, *, https: bool) -> str | None:
    """Why a state-changing request does not come from the dashboard's page, or None if it does.

    ``https``: the dashboard is served over HTTPS by a proxy (``--secure-cookies``), so its
    page's origin is ``https://`` whatever scheme the proxy speaks to it.
    """
    cookie = request.cookies.get(CSRF_COOKIE)
    header = request.headers.get(CSRF_HEADER)
    if not cookie or not header or not _same(cookie, header):
        return "CSRF check failed"
    origin = request.headers.get("origin")
    if origin is None:
        # Browsers send Origin with every POST; a request without one is not the page's fetch.
        return "refused: no Origin header (actions are sent by the dashboard's page)"
    # The Host has passed the allow-list (HostCheck), so the origin expected here is one of the
    # dashboard's own names, never one the sender picked; the port must be the same too, or a
    # page of another local service could post here.
    host = parse_host(request.headers.get("host"))
    scheme = "https" if https else request.url.scheme
    if host is None or scheme not in _DEFAULT_PORTS:
        return "refused: no usable Host header"
    expected = (scheme, host[0], host[1] or _DEFAULT_PORTS[scheme])
    match = _ORIGIN_RE.fullmatch(origin.lower())
    if match is not None and _valid_brackets(match["host"]):
        port = int(match["port"]) if match["port"] else _DEFAULT_PORTS[match["scheme"]]
        if (match["scheme"], match["host"], port) == expected:
            return None
    shown = f"{scheme}://{host[0]}" + (f":{host[1]}" if host[1] else "")
    hint = (
        "--secure-cookies says it is served over HTTPS"
        if https
        else "behind an HTTPS proxy, start it with --secure-cookies"
    )
    return f"refused: Origin {origin[:100]!r} is not this dashboard's ({shown}; {hint})"
