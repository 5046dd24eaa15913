"""The one rule a bearer token must meet: printable ASCII; and the length below which ``serve`` warns.

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
# Below this a token is warned about at start (``short_warning``): docs/operations.md says to mint 32
# random bytes (``openssl rand -hex 32``: 64 characters), and nothing limits the rate of 401s.
MIN_TOKEN_CHARS = 32


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


def short_warning(variable: str, tokens: list[str]) -> str | None:
    """The line ``serve`` logs at start when some of ``tokens`` (those of ``variable``) are shorter
    than ``MIN_TOKEN_CHARS``, or None. A warning, not a refusal: deployments running on shorter tokens
    today would stop starting on upgrade, and a long random token is the operator's to mint. The line
    counts them and never quotes one (a secret, and a short one is the easier to guess)."""
    short = sum(1 for token in tokens if len(token) < MIN_TOKEN_CHARS)
    if not short:
        return None
    return (
        f"{variable} holds {short} token(s) shorter than {MIN_TOKEN_CHARS} characters: nothing limits "
        "the rate of guesses (401s), so mint each with 'openssl rand -hex 32' (docs/operations.md)"
    )
