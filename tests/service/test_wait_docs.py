"""The waits the docs give an operator in seconds are the code's: how long a stopping replica may take
(docs/operations.md, "Shutdown", which the grace periods are sized from) and how far apart a Redis
client's retries are (docs/sidecar.md: what a master down costs a walk).

Both were written as figures beside the code and drifted from it in round 49 (helper docs49): the
exit guard's 5 s least bound was left out of "19 s at the default 1 s" (20 s), and the retries were
given as 20 and 40 ms apart, the backoff's base and its first doubling, where redis-py waits 40 and
80 ms (its first wait follows one failure). In round 50 the guard's last acts (``LAST_ACTS_S``) made
the stop 1 s longer, and the comments beside the manifests' grace periods still gave 20 and 15 s
(helper docs50).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis
import redis.retry

from service.api.exit_guard import LAST_ACTS_S, MIN_BOUND_S
from service.app import EXIT_TIMEOUTS, STOP_TIMEOUTS
from service.delivery.retries import short_retry
from service.settings import Settings
from tests.deploy.manifests import containers_of, find_one, pod_spec

ROOT = Path(__file__).resolve().parents[2]
GRACEFUL_SHUTDOWN_S = Settings.model_fields["graceful_shutdown_s"].default  # the runbook's figures are at it
DOCS = ROOT / "docs"
# A bound as the runbook writes it: "**10 s + 3 (multiplication sign) `ROLLOUT_REDIS_TIMEOUT_S`**".
_BOUND = r"\*\*(\d+) s \+ (\d+) \N{MULTIPLICATION SIGN} `ROLLOUT_REDIS_TIMEOUT_S`\*\*"


def _flat(page: str, section: str) -> str:
    """One section of a page (up to the next heading of its level or above), its lines joined."""
    text = (DOCS / page).read_text().split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return " ".join(text.split())


def _said(pattern: str, text: str) -> tuple[str, ...]:
    match = re.search(pattern, text)
    assert match is not None, f"the docs no longer say {pattern!r}"
    return match.groups()


def _default_timeout_s() -> float:
    default = Settings.model_fields["redis_timeout_s"].default
    assert isinstance(default, float)
    return default


def test_the_shutdown_bounds_the_runbook_gives_are_the_service_s() -> None:
    """The stop's own waits (``STOP_TIMEOUTS``), the exit guard's end (``EXIT_TIMEOUTS``, its least
    ``MIN_BOUND_S``), each after uvicorn's graceful wait, and the Kubernetes total with the preStop
    sleep, at the default command timeout the docs name."""
    text = _flat("operations.md", "Shutdown")
    timeout_s = _default_timeout_s()
    graceful, stops, total, default = _said(
        _BOUND + r" of the signal \((\d+) s at the default (\d+) s\)", text
    )
    assert (float(default), int(graceful), int(stops)) == (timeout_s, GRACEFUL_SHUTDOWN_S, STOP_TIMEOUTS)
    assert float(total) == GRACEFUL_SHUTDOWN_S + STOP_TIMEOUTS * timeout_s
    graceful, exits, least, total = _said(
        _BOUND + r" after the signal, the timeouts' part (\d+) s at least "
        rf"\((\d+) s at the default {default} s\)",
        text,
    )
    ended_s = GRACEFUL_SHUTDOWN_S + max(EXIT_TIMEOUTS * timeout_s, MIN_BOUND_S)
    assert (int(graceful), int(exits), float(least)) == (GRACEFUL_SHUTDOWN_S, EXIT_TIMEOUTS, MIN_BOUND_S)
    assert float(total) == ended_s
    deployment = find_one("Deployment", "rollout-scheduler")
    pre_stop, with_it, grace = _said(
        rf"its (\d+) s `preStop` sleep before that: (\d+) s at the default {default} s inside the "
        r"Deployment's (\d+) s `terminationGracePeriodSeconds`",
        text,
    )
    sleep = containers_of(deployment)["service"]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert (int(pre_stop), int(grace)) == (sleep, pod_spec(deployment)["terminationGracePeriodSeconds"])
    assert float(with_it) == sleep + ended_s


def test_the_stops_totals_with_the_last_acts_are_the_service_s_in_the_runbook_and_the_comments() -> None:
    """An operator sizes a grace period from "Shutdown" and from the comments beside the manifests':
    each total counts the exit guard's last acts after its bound, with the preStop sleep on
    Kubernetes and without one under compose."""
    text = _flat("operations.md", "Shutdown")
    timeout_s = _default_timeout_s()
    ended_s = GRACEFUL_SHUTDOWN_S + max(EXIT_TIMEOUTS * timeout_s, MIN_BOUND_S) + LAST_ACTS_S
    sleep = containers_of(find_one("Deployment", "rollout-scheduler"))["service"]["lifecycle"]["preStop"]
    pre_stop = sleep["sleep"]["seconds"]
    (with_acts,) = _said(r"`terminationGracePeriodSeconds`, (\d+) s with the last acts", text)
    (compose_s,) = _said(r"`stop_grace_period` is \d+ s, for (\d+) s \(no `preStop`\)", text)
    assert (float(with_acts), float(compose_s)) == (pre_stop + ended_s, ended_s)
    deployment = " ".join((ROOT / "deploy" / "k8s" / "deployment.yaml").read_text().replace("#", "").split())
    compose = " ".join((ROOT / "deploy" / "compose.yaml").read_text().replace("#", "").split())
    (in_deployment,) = _said(r"\"Shutdown\"\): (\d+) s, inside the \d+ s grace period", deployment)
    (in_compose,) = _said(r"\"Shutdown\"\): (\d+) s; Docker's default", compose)
    assert (float(in_deployment), float(in_compose)) == (pre_stop + ended_s, ended_s)


def _waits(retry: redis.retry.Retry, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The sleeps ``retry`` takes between the tries of a call that always fails to connect, as redis-py
    spaces them."""
    slept: list[float] = []
    monkeypatch.setattr(redis.retry, "sleep", slept.append)

    def refused() -> None:
        raise redis.ConnectionError("refused")

    with pytest.raises(redis.ConnectionError):
        retry.call_with_retry(refused, lambda _: None)
    return slept


def test_the_retries_the_sidecar_page_gives_are_the_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    text = " ".join((DOCS / "sidecar.md").read_text().split())
    said = r"retries a call as the service's does, (\w+), (\d+) and (\d+) ms apart"
    count, first, second = _said(said, text)
    waits = _waits(short_retry(), monkeypatch)
    assert {"once": 1, "twice": 2}.get(count) == len(waits) == 2
    assert [int(first) / 1000, int(second) / 1000] == pytest.approx(waits)
