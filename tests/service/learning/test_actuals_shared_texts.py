"""The history read from the actuals stream holds one string object per distinct prompt id (and text
feature value), not one per row: a 2M-row history of a few hundred thousand prompts held a copy of
its prompt id in every row, ~100 MB of duplicates."""

from __future__ import annotations

import redis

from predictors.history import History
from service.api.learning_schemas import ActualReport
from service.learning.actuals import ActualsLog
from service.learning.shared_texts import SharedTexts
from tests.service.api_helpers import actual_report


def _reports(step: int, samples: int, **fields: object) -> list[ActualReport]:
    """``samples`` reports of prompt p3 at ``step``, each with ``fields`` on top."""
    return [ActualReport.model_validate({**actual_report(step, 3, i), **fields}) for i in range(samples)]


def test_the_rows_of_one_prompt_hold_one_prompt_id_object_across_reads(redis_client: redis.Redis) -> None:
    log = ActualsLog(redis_client, maxlen=10**6)
    history = History()
    cursor = "0-0"
    for step in range(3):  # three syncs, as a replica follows the stream step by step
        log.append(_reports(step, samples=40))
        rows, cursor, *_ = log.rows_after(cursor)
        history.append(rows)
    prompt_ids = history.trace.prompt_id
    assert len(prompt_ids) == 120
    assert len({id(prompt_id) for prompt_id in prompt_ids}) == 1


def test_the_rows_of_one_text_feature_value_hold_one_object(redis_client: redis.Redis) -> None:
    log = ActualsLog(redis_client, maxlen=10**6)
    log.append(_reports(0, samples=40, features={"domain": "geometry", "difficulty": 3.0}))
    rows = log.rows_after("0-0").rows
    domains = History(rows).trace.categorical["domain"]
    assert list(set(domains)) == ["geometry"]
    assert len({id(domain) for domain in domains}) == 1


def test_the_shared_table_never_holds_more_than_its_limit() -> None:
    # bounded, so it does not keep the ids of rows the capped history has long dropped
    texts = SharedTexts(limit=4)
    for i in range(100):
        texts(f"prompt-{i}")
        assert len(texts) <= 4
    first = texts("prompt-again")
    assert texts("".join(["prompt-", "again"])) is first  # still one object per text after a restart
