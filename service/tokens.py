"""The one rule a bearer token must meet: printable ASCII.

A header value travels as latin-1 and the service reads it so: a token with other characters can
never match one the service holds, and httpx cannot even encode it (a UnicodeEncodeError traceback
from deep inside the client). The service checks its own tokens with this at start; the client and
every command that sends a token check theirs before anything else runs. Imports nothing, so the
trainer-side client stays light.
"""

from __future__ import annotations

RULE = "a token must be printable ASCII (a header cannot carry others)"
# Where a command that calls the service reads its ``--token`` when the flag is absent (docs/client.md's
# name too): a flag's value is on the command line, which ``ps`` and /proc show every user of the host.
TOKEN_VARIABLE = "SCHEDULER_TOKEN"


def check_token(token: str) -> str:
    """``token`` if a header can carry it; ``ValueError`` stating the rule if not (the message never
    quotes the token: it is a secret)."""
    if not (token.isascii() and token.isprintable()):
        raise ValueError(RULE)
    return token


def check_token_flag(flag: str, token: str | None) -> None:
    """Refuse a token given as ``flag`` (``--token``) before the command starts anything, naming the
    flag: the command would otherwise fail only when it first builds its HTTP client."""
    if token:
        try:
            check_token(token)
        except ValueError:
            raise ValueError(f"{flag}: {RULE}") from None
