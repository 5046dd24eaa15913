"""Which names a request's ``features`` may not use: a trace column's, or another tool's name for one.

An item's or a report's ``features`` are free columns the predictor learns from; the service folds
each report into the history it trains on as one trace row, its features beside the trace's own
columns. A feature named as one of those columns (``output_tokens``, ``step``, ``reward``...) was
accepted, stored in the actuals stream for good and trained on: ``output_tokens`` (or vLLM's
``completion_tokens``) equal to the output handed the model the very length it is to predict, a
``max_tokens`` meant as the cap left the cap unset, and in a trace written from the history the
feature took the real column's place. Every trace reader refuses a file column so named
(``predictors.headerhints.alias_refusal``, edges60); the API refuses the feature alike, naming the
field to use (api60). A name of the trace's columns in another case (``Output_Tokens``) stays a
feature, as a file's column so named does. Which names are refused is ``predictors.featurenames``'
rule, below the service, so that the stored reports an older release took with such a feature are
read back without it (edges61); this module says why, in the API's words.
"""

from __future__ import annotations

from typing import Literal

from predictors.featurenames import TRACE_COLUMNS, refused
from predictors.headerhints import ALIASES

Owner = Literal["item", "report"]
# The item's fields that are trace columns too; its other columns only a run's report knows.
_ITEM_FIELDS = {"prompt_id": "the item's", "prompt_tokens": "the item's", "max_new_tokens": "the item's"}
_ITEM_OTHER = {
    "step": "the request's field 'step'",
    "sample_idx": "numbered by the item's 'n'",
    "output_tokens": "the length a run reports (POST /actuals), the answer the predictor is to find",
    "finish_reason": "what a run reports (POST /actuals), not known before it",
    "reward": "what a run reports (POST /actuals), not known before it",
}
_KEEP = (
    "a feature may not carry a trace column's name nor another tool's name for one, as a trace file's "
    "column may not; to keep it as a feature, give it a name of its own"
)


def refusal(name: str, owner: Owner) -> str | None:
    """Why ``name`` may not name a feature of an ``owner`` (an item of ``POST /schedule``, a report
    of ``POST /actuals``), in the trace readers' words and naming the field to use; None where it
    may. Which names are refused is ``predictors.featurenames.refused``'s rule, the one the stored
    reports a release before it took are read back by (their features so named are left out)."""
    if not refused(name):
        return None
    if name in TRACE_COLUMNS:
        return f"{name!r} is a trace column, {_whose(name, owner)}: a feature so named shadows it ({_KEEP})"
    column, whose = ALIASES[name.casefold()]
    if owner == "report" or column in _ITEM_FIELDS:
        return f"{name!r} is {whose}; the {owner}'s field is {column!r}: set it there ({_KEEP})"
    return f"{name!r} is {whose}; the trace's column is {column!r}, {_ITEM_OTHER[column]} ({_KEEP})"


def _whose(column: str, owner: Owner) -> str:
    """Where ``column``'s value belongs in a request of ``owner``."""
    if owner == "report":
        return "the report's own field"
    if column in _ITEM_FIELDS:
        return "the item's own field"
    return _ITEM_OTHER[column]


def item_feature(name: str) -> str:
    """A ``POST /schedule`` item's feature name, refused (``ValueError``) where ``refusal`` says why."""
    return _checked(name, "item")


def report_feature(name: str) -> str:
    """A ``POST /actuals`` report's feature name, refused (``ValueError``) where ``refusal`` says why."""
    return _checked(name, "report")


def _checked(name: str, owner: Owner) -> str:
    why = refusal(name, owner)
    if why is not None:
        raise ValueError(why)
    return name
