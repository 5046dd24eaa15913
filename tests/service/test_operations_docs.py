"""docs/operations.md's "What to watch": every query it suggests runs on what is exported.

The service's and the sidecar's metric sections (docs/api.md, docs/sidecar.md) are held to their
expositions by tests/service/api/test_observability.py and tests/service/sidecar/test_health.py;
the runbook is held to those sections here, so an alert copied from it finds its series. And the
settings table's sizing of the planning threads is the service's own, and so are the stop's totals
that "Shutdown" and the manifests' comments give."""

from __future__ import annotations

import re

from service.api.exit_guard import LAST_ACTS_S, MIN_BOUND_S
from service.app import EXIT_TIMEOUTS
from service.commands.serve import GRACEFUL_SHUTDOWN_S
from service.context import PLAN_QUEUE_THREADS
from service.settings import Settings
from tests.doc_refs import ROOT
from tests.service.metrics_docs import DOCS, documented_metrics, queried_metrics, rates_without_range


def _watch() -> str:
    return (DOCS / "operations.md").read_text().split("## What to watch", 1)[1].split("\n## ", 1)[0]


def _exported() -> dict[str, frozenset[str]]:
    service = (DOCS / "api.md").read_text().split("## Metrics", 1)[1].split("\n## ", 1)[0]
    sidecar = (DOCS / "sidecar.md").read_text().split("**Metrics (`--health-port`).**", 1)[1]
    sidecar_labels = frozenset({"worker_id"})  # every sidecar series carries it and no other
    return {
        **documented_metrics(service),
        **dict.fromkeys(documented_metrics(sidecar.split("\n\n", 1)[0]), sidecar_labels),
    }


def test_every_metric_the_runbook_queries_is_exported_with_the_labels_it_names() -> None:
    exported = _exported()
    queried = queried_metrics(_watch())
    assert len(queried) > 10
    unknown = [name for name, _ in queried if name not in exported]
    assert not unknown
    assert not [(name, labels) for name, labels in queried if not labels <= exported[name]]


def test_every_rate_the_runbook_suggests_gives_its_range() -> None:
    assert not rates_without_range(_watch())


def test_a_rate_without_a_range_is_found() -> None:
    """The check above can fail: the expression the runbook held until 2026-12-04 is caught."""
    assert rates_without_range('`rate(rollout_reaped_leases_total{outcome="requeued"})` above 0') == [
        'rate(rollout_reaped_leases_total{outcome="requeued"}'
    ]
    assert not rates_without_range('`rate(rollout_reaped_leases_total{outcome="requeued"}[5m])`')


def test_the_threads_the_settings_table_gives_steps_in_line_are_the_service_s() -> None:
    """``ROLLOUT_MAX_CONCURRENT_PLANS``'s row tells an operator how many steps wait in line on threads
    (more wait threadless, their ``ROLLOUT_PLAN_QUEUE_TIMEOUT_S`` running): the number the service sizes
    its planning pool with beside the plan slots (``service/startup.py``)."""
    row = next(
        line
        for line in (DOCS / "operations.md").read_text().splitlines()
        if line.startswith("| `ROLLOUT_MAX_CONCURRENT_PLANS` |")
    )
    in_line = re.search(r"one a plan slot, and (\d+) for those in line", row)
    assert in_line, "the row says no longer how many threads steps in line hold"
    assert int(in_line.group(1)) == PLAN_QUEUE_THREADS


def _stop_s() -> float:
    """How long after SIGTERM a stalled-Redis stop of ``serve`` may end at the default timeout: the
    graceful wait, the exit guard's bound, and its last acts (service/api/exit_guard.py)."""
    timeout_s = float(Settings.model_fields["redis_timeout_s"].default)
    return GRACEFUL_SHUTDOWN_S + max(EXIT_TIMEOUTS * timeout_s, MIN_BOUND_S) + LAST_ACTS_S


def _seconds(pattern: str, text: str) -> float:
    found = re.search(pattern, " ".join(text.split()))
    assert found, f"no longer says {pattern!r}"
    return float(found.group(1))


def test_the_stops_totals_the_runbook_and_the_manifests_comments_give_are_the_code_s() -> None:
    """An operator sizes a grace period from "Shutdown" and the comments beside the manifests' own:
    round 50 added the exit guard's last acts (``LAST_ACTS_S``) to the stop while the Deployment's
    comment still said 20 s and compose's 15 s."""
    runbook = (DOCS / "operations.md").read_text().split("## Shutdown", 1)[1].split("\n## ", 1)[0]
    pre_stop = _seconds(r"Kubernetes adds its (\d+) s `preStop` sleep", runbook)
    bound = _stop_s() - LAST_ACTS_S
    assert _seconds(r"\((\d+) s at the default 1 s\), whatever still runs", runbook) == bound
    assert _seconds(r"`preStop` sleep before that: (\d+) s at the default 1 s", runbook) == pre_stop + bound
    assert _seconds(r"(\d+) s with the last acts", runbook) == pre_stop + _stop_s()
    assert _seconds(r"`stop_grace_period` is \d+ s, for (\d+) s \(no `preStop`\)", runbook) == _stop_s()
    deployment = (ROOT / "deploy" / "k8s" / "deployment.yaml").read_text().replace("#", "")
    assert _seconds(r"Shutdown\"\): (\d+) s, inside the", deployment) == pre_stop + _stop_s()
    compose = (ROOT / "deploy" / "compose.yaml").read_text().replace("#", "")
    assert _seconds(r"Shutdown\"\): (\d+) s; Docker's default", compose) == _stop_s()
