"""``stages.predict`` builds the trajectories ``PREDICT_CHECK_EVERY`` at a time (the caller's deadline
checked between): every trajectory past the first chunk is its own sample, with its own predicted
length, as one built in a single pass is."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.api.schemas import ScheduleRequest
from service.context import Context
from service.pipeline import stages
from tests.service.api_helpers import batch_body


def test_every_trajectory_past_the_first_chunk_is_its_own_sample_with_its_own_length(
    client: TestClient,
) -> None:
    ctx: Context = client.app.state.context  # type: ignore[attr-defined]
    prompts, n = 5, 300  # 1,500 trajectories: two chunks
    body = ScheduleRequest.model_validate(batch_body(prompts=prompts, n=n))
    checked = stages.validate(body, ctx)
    trajectories, _ = stages.predict(body, checked, ctx)
    assert len(trajectories) == prompts * n > stages.PREDICT_CHECK_EVERY
    samples = {(t.prompt_id, t.sample_idx) for t in trajectories}
    assert samples == {(f"p{i}", s) for i in range(prompts) for s in range(n)}
    by_prompt = {f"p{i}": 100 + 10 * i for i in range(prompts)}
    assert all(t.prompt_tokens == by_prompt[t.prompt_id] for t in trajectories)
