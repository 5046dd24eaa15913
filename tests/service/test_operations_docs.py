"""docs/operations.md's "What to watch": every query it suggests runs on what is exported.

The service's and the sidecar's metric sections (docs/api.md, docs/sidecar.md) are held to their
expositions by tests/service/api/test_observability.py and tests/service/sidecar/test_health.py;
the runbook is held to those sections here, so an alert copied from it finds its series. And the
settings table's sizing of the planning threads is the service's own."""

from __future__ import annotations

import re

from service.context import PLAN_QUEUE_THREADS
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
