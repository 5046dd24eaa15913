"""Who may be named in ``Host``: the guard against DNS rebinding of the servers that trust loopback.

A service without tokens trusts every caller, and ``serve`` lets it listen on loopback only; the
sidecar's pull API has no auth and always listens on loopback. Loopback keeps other machines out,
not a web page open in the browser of the developer who ran ``make run``: the page's own name, which
its owner controls, can be made to resolve to 127.0.0.1 (DNS rebinding), after which the browser
lets the page send requests to that port as same-origin, and read the answers. What the browser
cannot change is ``Host``: it names the page's name, not a loopback one. So these servers answer only
to ``localhost``, ``127.0.0.1`` and ``[::1]`` (any port), and the names an operator adds
(``ROLLOUT_ALLOWED_HOSTS``: a service reached through a name of its own, a container's). Any other
``Host``, or none, is refused before routing with 421 Misdirected Request (RFC 9110, 15.5.20: the
server will not answer for that authority; 400 would call the request malformed, which it is not).

Starlette's ``TrustedHostMiddleware`` does this check, but answers a plain-text 400 of its own, not
an error from the app's table, and reads ``[::1]:8000`` as host ``[``; so here the check is ours.
A service with tokens needs no guard: a rebinding page has no token to send.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from service.hosts.names import LOOPBACK_NAMES, host_name, refused_host  # the rule, without starlette
from service.problems.table import MisdirectedHostError, lookup, problem_response

Refusal = Callable[[str, str | None], Response]  # (path, the Host sent or None) -> the 421


class HostAllowList:
    """Pure ASGI middleware: a request whose ``Host`` names none of ``allowed`` is answered by
    ``refusal`` (the app's 421, from its own error table) without reaching the app."""

    def __init__(self, app: ASGIApp, allowed: Collection[str], refusal: Refusal) -> None:
        self.app = app
        self.allowed = LOOPBACK_NAMES | frozenset(allowed)
        self.refusal = refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass requests for an allowed name through unchanged; refuse the rest."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        sent = Headers(scope=scope).get("host")
        if sent is not None and host_name(sent) in self.allowed:
            await self.app(scope, receive, send)
            return
        await self.refusal(scope["path"], sent)(scope, receive, send)


def service_refusal(path: str, sent: str | None) -> Response:
    """The service's 421: a problem from its one table, naming the setting that adds a name."""
    error = MisdirectedHostError(
        refused_host(sent, ", any port, and the names in ROLLOUT_ALLOWED_HOSTS, while it has no token"),
        field="Host",
        value=None if sent is None else sent[:100],
    )
    problem = lookup(error)  # outside FastAPI's handlers, but answered from the same table
    extra = {"field": error.field, "value": error.value}
    detail, slug = error.detail, problem.slug
    return problem_response(problem.status, problem.title, detail, slug=slug, instance=path, extra=extra)
