"""Which names no feature may carry, and stored rows read back without the features that do.

A feature named as a trace column (``output_tokens``, ``step``...) or by another tool's name for one
(``max_tokens``, vLLM's ``completion_tokens``: ``predictors.headerhints.ALIASES``) is refused by every
trace reader (edges60) and by the API (``service.api.feature_names``, api60, which says why in the
refusal). The rule lives here, below both, so that the predictor's side applies the same one to rows
the API took before it refused them: the actuals stream keeps such reports until they age out (a
cap of reports, no expiry), and every replica's history read them back and trained on them, so a
retrain after the upgrade fitted features a request can no longer send, among them the very length
it predicts (edges61). A name of the trace's columns in another case (``Output_Tokens``) stays a
feature, as a file's column so named does.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from predictors.headerhints import ALIASES
from predictors.tracetable import Trace
from scheduler.trace import OPTIONAL_COLUMNS, REQUIRED_COLUMNS

TRACE_COLUMNS = frozenset(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)


def refused(name: str) -> bool:
    """Whether no feature may be named ``name``: a trace column's own name, matched exactly (a file
    cannot hold it twice), or another tool's name for one, casefolded, as the readers match it."""
    return name in TRACE_COLUMNS or name.casefold() in ALIASES


def without_refused(trace: Trace) -> tuple[Trace, list[str], int]:
    """``trace`` without its extra columns of a ``refused`` name, the names left out (in the trace's
    order), and how many rows held a value in one of them; ``trace`` itself where it has none. Every
    row is kept, with the rest of its features: the row's own columns are what the history learns from."""
    numeric = [name for name in trace.numeric if refused(name)]
    categorical = [name for name in trace.categorical if refused(name)]
    if not numeric and not categorical:
        return trace, [], 0
    held = np.zeros(len(trace), dtype=bool)
    for name in numeric:
        held |= ~np.isnan(trace.numeric[name])
    for name in categorical:
        held |= trace.categorical[name] != ""
    kept = replace(
        trace,
        numeric={k: v for k, v in trace.numeric.items() if k not in numeric},
        categorical={k: v for k, v in trace.categorical.items() if k not in categorical},
    )
    return kept, [*numeric, *categorical], int(held.sum())
