"""Bearer-token authentication with two scopes: trainers plan and retrain, workers report.

A trainer token may call everything (a trainer also reports actuals through the client); a worker
token may only report actuals and read progress, so a leaked worker credential cannot schedule or
retrain: it gets 403. A worker token bound to worker ids (``worker_id=token``,
``service/auth/worker_tokens.py``) may moreover report actuals only for those workers (``Caller.workers``,
checked by ``POST /actuals``). A missing or unknown token gets 401. With no token configured the
service trusts every caller, which ``serve`` allows only on a loopback address. Tokens are compared
in constant time. The lists are parsed once, when the app is built (``Credentials``).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fastapi import Request, Response

from service.auth.worker_tokens import WorkerToken
from service.body_encoding import Utf8BodyRoute
from service.problems.table import ForbiddenError, UnauthorizedError
from service.settings import Settings


class Scope(StrEnum):
    """What a token may do."""

    TRAINER = "trainer"  # /schedule, /models/*, actuals, progress
    WORKER = "worker"  # actuals, progress


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: its scope, and the workers it may report actuals for."""

    scope: Scope
    workers: frozenset[str] | None = None  # None: any worker (a trainer, an unbound worker token)


def _matches(token: str, known: Sequence[str]) -> bool:
    """Constant-time membership, so a caller cannot learn a token byte by byte from timing."""
    found = False
    for candidate in known:
        found |= hmac.compare_digest(token.encode(), candidate.encode())
    return found


def _worker(token: str, entries: Sequence[WorkerToken]) -> Caller | None:
    """The worker caller ``token`` is, or None: every entry is compared (constant time, as
    ``_matches``), and the workers of every entry it matches are the ones it may report for."""
    found, unbound, workers = False, False, set()
    for entry in entries:
        same = hmac.compare_digest(token.encode(), entry.token.encode())
        found |= same
        if same and entry.worker_id is None:
            unbound = True
        elif same and entry.worker_id is not None:
            workers.add(entry.worker_id)
    if not found:
        return None
    return Caller(Scope.WORKER, None if unbound else frozenset(workers))


@dataclass(frozen=True, slots=True)
class Credentials:
    """The token lists of the settings, parsed once when the app is built (``create_app``).

    They are settings, fixed for the app's life (docs/operations.md: entries are read at start), so
    requests only compare; parsing both lists (each entry checked, each worker id validated) had run
    again on every authenticated request."""

    trainer: tuple[str, ...]
    workers: tuple[WorkerToken, ...]

    @classmethod
    def of(cls, settings: Settings) -> Credentials:
        """The lists of ``settings`` (validated when the settings were built)."""
        return cls(tuple(settings.trainer_token_list()), tuple(settings.worker_token_entries()))

    @property
    def enabled(self) -> bool:
        """Whether any token is configured; without one every caller is trusted (loopback only)."""
        return bool(self.trainer or self.workers)


def caller_of(credentials: Credentials, authorization: str | None) -> Caller:
    """Resolve an ``Authorization`` header into a caller, or raise 401."""
    if not credentials.enabled:
        return Caller(Scope.TRAINER)
    if not authorization:
        raise UnauthorizedError("missing bearer token: send 'Authorization: Bearer <token>'")
    kind, _, token = authorization.partition(" ")
    if kind.lower() != "bearer" or not token.strip():
        raise UnauthorizedError("malformed Authorization header: expected 'Bearer <token>'")
    token = token.strip()
    if _matches(token, credentials.trainer):
        return Caller(Scope.TRAINER)
    worker = _worker(token, credentials.workers)
    if worker is None:
        raise UnauthorizedError("unknown bearer token")
    return worker


class ScopeCheck:
    """A FastAPI dependency that admits only tokens of the ``allowed`` scopes."""

    def __init__(self, *allowed: Scope) -> None:
        self.allowed = allowed

    def __call__(self, request: Request) -> Caller:
        """The caller; 401 without a known token, 403 outside ``allowed``."""
        credentials: Credentials = request.app.state.credentials
        caller = caller_of(credentials, request.headers.get("authorization"))
        if caller.scope not in self.allowed:
            names = " or ".join(s.value for s in self.allowed)
            raise ForbiddenError(
                f"a {caller.scope.value} token may not call {request.url.path}; it needs a {names} token"
            )
        return caller


class AuthFirstRoute(Utf8BodyRoute):
    """A route that checks the caller's token before FastAPI reads the body.

    FastAPI decodes a JSON body before it runs a route's dependencies, so a caller without a valid
    token who sent a malformed body was told what is wrong with the body (422) instead of 401/403.
    Authentication comes first: the route's ``ScopeCheck`` runs here, before the body is read, and
    again as a declared dependency, where it also documents the route's security. Then a JSON body
    is checked to be UTF-8 (``Utf8BodyRoute``), since FastAPI's decoder would read UTF-16 and UTF-32
    too.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler (the body's encoding checked first), preceded by its scope checks."""
        handler = super().get_route_handler()
        checks = [d.dependency for d in self.dependencies if isinstance(d.dependency, ScopeCheck)]
        if not checks:
            return handler

        async def guarded(request: Request) -> Response:
            for check in checks:
                check(request)
            return await handler(request)

        return guarded


trainer_only = ScopeCheck(Scope.TRAINER)
any_client = ScopeCheck(Scope.TRAINER, Scope.WORKER)
