"""``benchgen.with_quantiles`` gives the benchmark's batches the quantiles the service's predictors
send (p50 the prediction, p90 a ratio of it within the cap), so that ``bench solver --p90-ratio``
runs the hedges that return before any pricing on a batch without them."""

from __future__ import annotations

from scheduler.benchgen import bench_request, with_quantiles
from scheduler.policies.robust import spreads


def test_every_trajectory_gets_its_prediction_as_p50_and_the_ratio_of_it_as_p90_within_its_cap() -> None:
    request = bench_request(1_024, 16, 0)
    hedged = with_quantiles(request, 1.6)
    for plain, given in zip(request.trajectories, hedged.trajectories, strict=True):
        assert given.quantiles == {
            0.5: plain.predicted_tokens,
            0.9: min(float(plain.max_new_tokens), 1.6 * plain.predicted_tokens),
        }
        assert given.predicted_tokens == plain.predicted_tokens
    assert any(t.quantiles[0.9] == t.max_new_tokens for t in hedged.trajectories)  # the cap holds some
    assert spreads(request.trajectories) is None
    assert spreads(hedged.trajectories) is not None  # what the hedges read


def test_a_ratio_of_0_leaves_the_request_as_it_is() -> None:
    request = bench_request(1_024, 16, 0)
    assert with_quantiles(request, 0.0) is request
