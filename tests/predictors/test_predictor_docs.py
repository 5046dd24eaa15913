"""docs/predictors.md's account of the stored model and of truncated lengths is the code's: the fields
it names in a version's ``metadata.json`` are keys a stored version has, and the shares of a prompt's
samples cut at their cap from which each censoring rule applies are ``predictors/censored.py``'s.

An operator reads ``metadata.json`` by the names the page gives (``longest_gap``, since 2026-12-05,
past which serving projects the drift), and a trainer raising its cap between stages plans from the
shares the page states."""

from __future__ import annotations

import json
import re
from pathlib import Path

from predictors.censored import CENSORED_SHARE, TAIL_SHARE
from predictors.history import History
from predictors.model import fit
from predictors.store import ModelStore
from tests.predictors.helpers import FAST, drifting_trace

DOC = Path(__file__).resolve().parents[2] / "docs" / "predictors.md"
SHARES = {"half": 0.5, "a third": 1 / 3, "a quarter": 0.25, "a fifth": 0.2, "a tenth": 0.1}
_SHARE = "|".join(SHARES)


def _paragraph(starting: str) -> str:
    """The page's paragraph holding ``starting``, its lines joined."""
    text = DOC.read_text()
    start = text.index(starting)
    return " ".join(text[text.rfind("\n\n", 0, start) : text.find("\n\n", start)].split())


def named_fields(paragraph: str) -> set[str]:
    """The names a paragraph gives in backticks that read as a JSON key (``longest_gap``)."""
    return set(re.findall(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+)*)`", paragraph))


def test_every_metadata_json_field_the_page_names_is_a_key_of_a_stored_version(tmp_path: Path) -> None:
    trace = drifting_trace()
    store = ModelStore(tmp_path / "models")
    version = store.save(fit(History(trace.take(trace.step < 3)), FAST), fence_token=3)
    stored = json.loads((store.path(version) / "metadata.json").read_text())
    named = named_fields(_paragraph("`metadata.json`: feature names"))
    assert {"longest_gap", "synthetic", "fence_token"} <= named
    assert sorted(named - set(stored)) == []


def test_a_field_a_version_does_not_store_is_caught() -> None:
    assert named_fields("the longest gap (`longest_gaps`), `FitConfig`, `rs:retrain:fence`") == {
        "longest_gaps"
    }


def test_the_shares_of_cut_samples_the_censoring_rules_apply_from_are_the_code_s() -> None:
    """``at least half`` of a prompt's last step cut: p50 at least the cut, p90 the new cap; ``at
    least a tenth``, under half: p90 held at the cut."""
    paragraph = _paragraph("**Truncated lengths are lower bounds**")
    (censored,) = re.findall(rf"if at least ({_SHARE}) of a prompt's samples", paragraph)
    ((tail, under),) = re.findall(
        rf"\(at least ({_SHARE}) of that step's samples, under ({_SHARE})\)", paragraph
    )
    assert (SHARES[censored], SHARES[tail], SHARES[under]) == (CENSORED_SHARE, TAIL_SHARE, CENSORED_SHARE)
