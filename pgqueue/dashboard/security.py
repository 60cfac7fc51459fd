"""Who may use the dashboard, and proof that an action came from the dashboard's own page.

* **Authentication**: a bearer token (``Authorization: Bearer``, or ``?token=`` once, which sets
  an HttpOnly cookie) or HTTP basic auth. Required unless the server is bound to a loopback
  address; checked with constant-time comparisons.
* **CSRF**: every state-changing request must be a POST carrying the per-browser token from the
  ``pgq_csrf`` cookie in the ``X-CSRF-Token`` header (a double-submit token a cross-site page
  cannot read), and, when the browser sends an ``Origin``, it must be this server.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request

TOKEN_COOKIE = "pgq_token"
CSRF_COOKIE = "pgq_csrf"
CSRF_HEADER = "x-csrf-token"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Auth:
    token: str | None = None
    username: str | None = None
    password: str | None = None

    @property
    def required(self) -> bool:
        return self.token is not None or self.username is not None

    def check(self, request: Request) -> bool:
        if not self.required:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if self.token is not None:
            for candidate in (
                value if scheme.lower() == "bearer" else None,
                request.cookies.get(TOKEN_COOKIE),
                request.query_params.get("token"),
            ):
                if candidate and _same(candidate, self.token):
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


def csrf_ok(request: Request) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE)
    header = request.headers.get(CSRF_HEADER)
    if not cookie or not header or not _same(cookie, header):
        return False
    origin = request.headers.get("origin")
    if origin is not None:
        # Same origin only: scheme://host[:port] of this very request.
        return urlsplit(origin).netloc == request.headers.get("host")
    return True
