"""The access token of ``starflow ui``: every request without it is refused (401).

An ASGI middleware around the whole app (the event streams and static files
included), so no page can forget the check.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING
from urllib.parse import urlencode

if TYPE_CHECKING:
    from starlette.responses import Response
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["TOKEN_COOKIE", "TokenAuth"]

TOKEN_COOKIE = "starflow_ui_token"


class TokenAuth:
    """Refuse (401) every request without the access token.

    Accepted: ``Authorization: Bearer TOKEN``, the ``starflow_ui_token``
    cookie, or ``?token=TOKEN`` on a GET, which sets the cookie and redirects
    to the same address without the token (so it leaves the address bar).
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    def _matches(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate.encode(), self._token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from starlette.datastructures import URL, Headers, QueryParams
        from starlette.requests import cookie_parser
        from starlette.responses import PlainTextResponse, RedirectResponse

        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        auth = headers.get("authorization", "")
        bearer = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        cookie = cookie_parser(headers.get("cookie", "")).get(TOKEN_COOKIE)
        if self._matches(bearer) or self._matches(cookie):
            await self.app(scope, receive, send)
            return
        url = URL(scope=scope)
        params = QueryParams(scope.get("query_string", b""))
        if scope.get("method") == "GET" and self._matches(params.get("token")):
            rest = [(k, v) for k, v in params.multi_items() if k != "token"]
            response: Response = RedirectResponse(
                url.path + (f"?{urlencode(rest)}" if rest else ""), status_code=303)
            response.set_cookie(TOKEN_COOKIE, self._token.decode(), httponly=True,
                                samesite="strict", path=scope.get("root_path") or "/")
            await response(scope, receive, send)
            return
        response = PlainTextResponse(
            "401 Unauthorized: this starflow ui needs its access token. Open the address "
            "`starflow ui` printed (it ends in ?token=…), or send Authorization: Bearer "
            "TOKEN.\n", status_code=401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)
