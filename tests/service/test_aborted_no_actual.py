"""An aborted generation is no actual: refused as one by ``POST /actuals`` and the trace import alike,
naming its finish reason (never its count), and stored as a result it makes none.

An engine's ``abort`` (a pause for a weight sync, a cancel) cut the generation before it ended, at
any count, 0 included (aborted before its first token): its count is no length, and learned as one
it teaches the predictor short, the long trajectories being the ones a pause cuts. So a result may
say ``abort`` at 0 tokens (the sidecar's ``/done`` stores it, which settles its trajectory), but no
entry of the history takes it. The rule is one function (``scheduler.trace.says_length``); an abort
at 0 was refused for its count (``must be >= 1``), which sent the user after the count of a report
that is no actual at all (trace55). Real Redis.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import redis
import typer
from fastapi.testclient import TestClient

from predictors.tracetable import FINISH_NAMES
from scheduler.trace import NO_LENGTH, TraceFormatError
from service.client.actuals import actual_from_result
from service.traceimport.importers import import_generic, parse_mapping
from tests.service.api_helpers import actual_report
from tests.service.finished import stored_entry
from tests.service.replay.clirun import run

HEADER = ["epoch", "uid", "k", "plen", "rlen", "why"]
MAPPED = ["step=epoch", "prompt_id=uid", "sample_idx=k", "prompt_tokens=plen", "output_tokens=rlen"]


@pytest.mark.parametrize("tokens", [0, 57])
def test_the_api_refuses_an_aborted_report_for_its_finish_and_stores_none_of_the_batch(
    client: TestClient, redis_client: redis.Redis, tokens: int
) -> None:
    batch = [
        actual_report(0, 0, 0),
        {**actual_report(0, 0, 1), "finish_reason": "abort", "output_tokens": tokens},
    ]
    response = client.post("/actuals", json={"actuals": batch})
    assert response.status_code == 422
    assert response.json()["field"] == "actuals[1].finish_reason"
    assert response.json()["detail"] == f"actuals[1].finish_reason='abort': {NO_LENGTH}"
    assert redis_client.exists("rs:actuals") == 0


def _rows(path: Path, rows: list[list[object]]) -> Path:
    """``rows`` under the user's own column names (``HEADER``, the finish reason in ``why``)."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(dict(zip(HEADER, r, strict=True))) + "\n" for r in rows))
        return path
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        writer.writerows(rows)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
@pytest.mark.parametrize("tokens", [0, 57])
def test_the_trace_import_refuses_an_aborted_row_for_its_finish_in_the_files_column(
    tmp_path: Path, suffix: str, tokens: int
) -> None:
    path = _rows(tmp_path / f"runs{suffix}", [[0, "a", 0, 10, 120, "stop"], [0, "a", 1, 10, tokens, "abort"]])
    line, cell = (3, "'abort'") if suffix == ".csv" else (2, "'abort'")  # csv counts its header
    with pytest.raises(TraceFormatError) as refused:
        import_generic(path, suffix[1:], parse_mapping([*MAPPED, "finish_reason=why"]))
    assert str(refused.value) == (
        f"{path}:{line}:why={cell}: as finish_reason (--map finish_reason=why): {NO_LENGTH}"
    )


def test_the_trace_import_command_writes_nothing_of_a_file_holding_an_abort(
    cli: typer.Typer, tmp_path: Path
) -> None:
    path = _rows(tmp_path / "runs.csv", [[0, "a", 0, 10, 120, "stop"], [0, "a", 1, 10, 0, "abort"]])
    out = tmp_path / "t.csv"
    args = ["trace", "import", str(path), "--from", "csv", "--out", str(out)]
    code, _, stderr = run(cli, [*args, *(f"--map={pair}" for pair in [*MAPPED, "finish_reason=why"])])
    assert code == 2
    assert f"{path}:3:why='abort': as finish_reason (--map finish_reason=why): {NO_LENGTH}" in stderr
    assert "must be >= 1" not in stderr
    assert not out.exists()


@pytest.mark.parametrize("tokens", [0, 57])
def test_an_aborted_result_stored_at_any_count_makes_no_actual(tokens: int) -> None:
    entry = stored_entry("abort", tokens)
    assert actual_from_result(0, entry, {}, {}) is None


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_finish_reason_padded_with_spaces_is_the_reason_it_names(tmp_path: Path, suffix: str) -> None:
    """A cell written `` length`` (a csv written with a space after each comma) is ``length``: the
    trace format's cells are read without their padding, the finish reason's too."""
    path = _rows(tmp_path / f"runs{suffix}", [[0, "a", 0, 10, 120, " length "], [0, "a", 1, 10, 57, " stop"]])
    imported = import_generic(path, suffix[1:], parse_mapping([*MAPPED, "finish_reason=why"]))
    assert [FINISH_NAMES[code] for code in imported.trace.finish_reason] == ["length", "stop"]
