"""Reading metric names and label names from the docs and from a Prometheus exposition, so tests can
hold the two to each other (a dashboard built from the docs must find every series it names)."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def documented_metrics(text: str) -> dict[str, frozenset[str]]:
    """``rollout_*`` names in backticks and the label names they are shown with; a name shown
    as ``name_{a,b}_total`` stands for each of ``name_a_total`` and ``name_b_total``."""
    found: dict[str, frozenset[str]] = {}
    for name, labels in re.findall(r"`(rollout_[a-z_{},]+?)(?:\{([a-z_,]*)\})?(?: 1)?`", text):
        head, _, tail = name.partition("{")
        middles, _, rest = tail.partition("}")
        for middle in middles.split(",") if tail else [""]:
            found[head + middle + rest] = frozenset(filter(None, labels.split(",")))
    return found


def exported_metrics(text: str) -> dict[str, frozenset[str]]:
    """Each exported family (named as its ``# TYPE`` line: ``_total`` on counters) with the label
    names its samples carry (``le`` aside); ``_created`` series are the client's own, not ours."""
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    found: dict[str, set[str]] = {}
    for match in re.finditer(r"^(rollout_[a-z_]+)(?:\{(.*)\})? ", text, re.MULTILINE):
        name = match.group(1)
        if name.endswith("_created"):
            continue
        family = next(f for f in families if name in (f, f + "_bucket", f + "_count", f + "_sum"))
        found.setdefault(family, set()).update(re.findall(r'([a-z_]+)="', match.group(2) or ""))
    return {name: frozenset(labels - {"le"}) for name, labels in found.items()}


_SELECTOR = re.compile(r"(rollout_[a-z_]+)(?:\{([^}]*)\})?(\[[0-9]+[smhd]\])?")
_SERIES = ("_bucket", "_count", "_sum")  # a histogram's series, queried by their own names


def queried_metrics(text: str) -> list[tuple[str, frozenset[str]]]:
    """Each ``rollout_*`` selector in a backticked span of ``text``, as (family, label names): a
    histogram's ``_bucket``/``_count``/``_sum`` named by its family; ``{a="x"}`` and ``{a}`` both
    give ``a``."""
    found = []
    for span in re.findall(r"`([^`]*rollout_[^`]*)`", text):
        for name, labels, _ in _SELECTOR.findall(span):
            family = next((name[: -len(s)] for s in _SERIES if name.endswith(s)), name)
            found.append((family, frozenset(re.findall(r"([a-z_]+)\s*(?:[=!]~|!?=|,|$)", labels))))
    return found


def rates_without_range(text: str) -> list[str]:
    """Each ``rate(``, ``irate(`` or ``increase(`` of a ``rollout_*`` selector in ``text`` that gives
    it no range (``[5m]``): invalid PromQL, which Prometheus refuses as a rule or a query."""
    calls = re.finditer(r"\b(?:i?rate|increase)\((rollout_[a-z_]+(?:\{[^}]*\})?)(\[[0-9]+[smhd]\])?", text)
    return [call.group(0) for call in calls if not call.group(2)]
