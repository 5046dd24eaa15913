"""Worker tokens bound to the worker ids they may report actuals for (``ROLLOUT_WORKER_TOKENS``).

The service learns each worker's speed from the actuals that name it, and trains the predictor on
them, so a worker credential that could report for any worker could skew every later plan. An entry
``worker_id=token`` binds ``token`` to that worker: ``POST /actuals`` with it is refused (403, nothing
stored) when any report names another worker. One token may be bound to several workers (an agent
that reports for the engines of one node: ``n0-gpu0=T,n0-gpu1=T``), and one worker may hold several
tokens (rotation: add the new entry, roll the worker, remove the old one).

Why entries in the setting rather than tokens derived from one server secret (an HMAC of the worker
id): one leaked credential is revoked by deleting its entry, where a derived token can only be revoked
by changing the secret and re-minting every worker's; the list is what an operator audits; and there
is no token format or key to maintain. The price is that adding a worker means adding its entry and
rolling the service (a rolling update, no downtime); fleets change far less often than steps run.

A plain ``token`` (no ``=``), the only form before bindings, stays accepted as an *unbound* worker
token (any worker, as a trainer token may), so an upgrade changes nothing; ``serve`` warns about
each at start. A token may not contain ``=`` (``openssl rand -hex 32`` never does), so an entry is
split at its *last* ``=``: a worker id may hold ``=`` (the API's name rule allows it, and such a
worker must be bindable too: ``a=b=T`` binds ``T`` to ``a=b``), and a padded base64 token
(``...==``) leaves nothing after the last ``=``, so it is refused at start, never read as a binding.
Every refusal names the entry by position only: its text may be a secret.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.auth.tokens import check_token
from service.names import name_error

VARIABLE = "ROLLOUT_WORKER_TOKENS"


@dataclass(frozen=True, slots=True)
class WorkerToken:
    """One entry of the setting."""

    token: str
    worker_id: str | None  # the worker it may report for; None: unbound (any worker)


def parse_worker_tokens(text: str) -> list[WorkerToken]:
    """The entries of a comma-separated ``ROLLOUT_WORKER_TOKENS``; ``ValueError`` for one that cannot
    be a worker token, naming it by position (``entry 2``), never by its text."""
    entries = [_entry(index, part.strip()) for index, part in enumerate(_parts(text), start=1)]
    bound = {e.token for e in entries if e.worker_id is not None}
    if any(e.worker_id is None and e.token in bound for e in entries):
        raise ValueError(f"a token in {VARIABLE} is both unbound and bound to a worker id")
    return entries


def _parts(text: str) -> list[str]:
    return [part for part in text.split(",") if part.strip()]


def _entry(index: int, text: str) -> WorkerToken:
    """Entry ``index`` (1-based): ``token`` or ``worker_id=token``, split at the last ``=`` (a token
    holds none; a worker id may)."""
    where = f"{VARIABLE} entry {index}"
    worker_id, sep, token = (part.strip() for part in text.rpartition("="))
    if not sep:
        return WorkerToken(token=check_token(token), worker_id=None)
    if not token:
        raise ValueError(
            f"{where} has no token after its last '=': write worker_id=token (a token may not hold '=')"
        )
    why = name_error(worker_id)
    if why is not None:
        raise ValueError(f"{where}: the part before the last '=' is not a worker id ({why})")
    return WorkerToken(token=check_token(token), worker_id=worker_id)


def unbound_warning(entries: list[WorkerToken]) -> str | None:
    """The line ``serve`` logs at start when some worker tokens are unbound, or None."""
    unbound = sum(1 for entry in entries if entry.worker_id is None)
    if not unbound:
        return None
    return (
        f"{VARIABLE} holds {unbound} unbound token(s): each may report actuals for any worker; "
        "bind each to its worker as worker_id=token (docs/operations.md)"
    )
