"""Every path and package-qualified name the docs and docstrings give still leads to code.

README.md and docs/*.md are read in their backticks and code blocks, the modules of scheduler/,
predictors/, service/ and tests/ in the double backticks of their docstrings and comments (see
tests/doc_refs.py). A file must exist (a glob match something), a dotted name import and resolve
attribute by attribute. The other docs tests hold commands, metrics, keys and the API to the code;
this one holds the names of the code itself, which move when a module is split."""

from __future__ import annotations

from functools import cache

from tests.doc_refs import (
    Reference,
    doc_files,
    doc_references,
    problem,
    references_in,
    source_files,
    source_references,
)

# References that are deliberately not code of this repository, each with why. A path outside the
# repository (/tmp/..., vLLM's vllm/v1/...) does not start with one of our directories, so it is never
# read as one of ours. Keep it short, and say why for each.
NOT_CODE: dict[str, str] = {
    "service.cli.served": "review53d's section of docs/experiments.md (history, not edited) names the "
    "function exit55 removed with uvicorn's replay of the signals it heard",
    "service/learning/actuals.py::_entry_row": "ids56's section of docs/experiments.md (history, not "
    "edited) names the entry read edges57 moved to service/learning/actuals_entry.py (``entry_row``)",
    "tests/service/sidecar/test_stop_signals_inherited.py": "review48a's section of docs/experiments.md "
    "(history, not edited) names the test ci59b folded into test_stop_signals_in_process.py, each of "
    "whose tests now also runs with SIGINT ignored as found (``_sigint_as_started``)",
    "tests/service/sidecar/result.py": "tidy58's section of docs/experiments.md (history, not edited) "
    "names the sidecar tests' RESULT module, which dups59 moved up to tests/service/finished.py",
}


@cache
def _in_docs() -> tuple[Reference, ...]:
    return tuple(reference for path in doc_files() for reference in doc_references(path))


@cache
def _in_sources() -> tuple[Reference, ...]:
    return tuple(reference for path in source_files() for reference in source_references(path))


def _broken(references: tuple[Reference, ...]) -> list[str]:
    return [
        f"{reference.where}: {reference.text} ({why})"
        for reference in references
        if reference.text not in NOT_CODE and (why := problem(reference)) is not None
    ]


def test_every_path_and_name_the_docs_give_exists() -> None:
    assert len(_in_docs()) > 200  # the reader still finds them: README.md alone names dozens
    assert not _broken(_in_docs())


def test_every_path_and_name_the_docstrings_and_comments_give_exists() -> None:
    assert len(_in_sources()) > 200
    assert not _broken(_in_sources())


def test_the_allowed_exceptions_are_still_written_and_still_not_code() -> None:
    """An entry whose reference was fixed or removed would hide the next stale one of that name."""
    assert set(NOT_CODE) <= {reference.text for reference in _in_docs() + _in_sources()}
    assert not [text for text in NOT_CODE if problem(Reference("allowed", text)) is None]


def test_the_stale_references_of_2026_12_04_are_caught() -> None:
    """The check can fail: the three the docs and docstrings held until 2026-12-04, a moved test
    file and a missing test, each reported with what is missing."""
    stale = "scheduler.deadlines.lateness, predictors.LengthPredictor, service.replay.replay_fit_config"
    assert [(ref.text, problem(ref)) for ref in references_in(stale, "x")] == [
        ("scheduler.deadlines.lateness", "scheduler.deadlines has no lateness"),
        ("predictors.LengthPredictor", "predictors has no LengthPredictor"),
        ("service.replay.replay_fit_config", "service.replay has no replay_fit_config"),
    ]
    assert problem(Reference("x", "tests/service/delivery/test_cut_short.py")) == "no such file or folder"
    assert problem(Reference("x", "tests/test_layering.py::test_nothing_here")) == (
        "no test_nothing_here defined in it"
    )
    assert problem(Reference("x", "service/sidecar/no_such_*.py")) == "no file matches"


def test_current_references_of_each_kind_resolve() -> None:
    current = (
        "scheduler.stealguard.lateness predictors.predictor.LengthPredictor.predict "
        "service/replay/*.py deploy/k8s/ tests/test_layering.py::test_scheduler_core_does_no_io"
    )
    references = list(references_in(current, "x"))
    assert len(references) == 5
    assert not [reference.text for reference in references if problem(reference) is not None]


def test_references_are_found_in_spans_and_blocks_but_not_outside_our_directories() -> None:
    text = "see `/tmp/service/x.py`, `vllm/v1/core/sched/scheduler.py`, `python -m service.cli run`"
    assert [reference.text for reference in references_in(text, "x")] == ["service.cli"]
