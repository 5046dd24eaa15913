"""The Gantt chart draws every trajectory, however many share a worker's row.

A worker running 64 trajectories at once stacks them in 64 lanes of under a pixel each, and the
renderer dropped some of them whole: on ``2xH100:64,2xAscend910B`` (a short-cot trace, step 3) the
trajectory that set the step's makespan was not drawn at all, so the chart showed its worker idle
for the last third of the step while the red makespan line stood past every bar."""

from __future__ import annotations

import io

from PIL import Image

from predictors.synthetic import synthetic_trace
from service.replay.harness import ReplayConfig, StepReplay, replay
from service.replay.report import gantt_png
from service.workerspec import parse_workers

POLICIES = ("lpt", "cpsat")


def _pixel_column(image: Image.Image, seconds: float, x_max: float) -> int:
    """The pixel column of ``seconds`` on a chart whose shared axis runs from 0 to ``x_max``: the
    panels' frame is the first and last column dark for half the image's height (the dashed lower
    bound is dark for less)."""
    width, height = image.size
    frame = [x for x in range(width) if sum(_dark(image, x, y) for y in range(height)) > height // 2]
    left, right = frame[0], frame[-1]
    return round(left + (right - left) * seconds / x_max)


def _dark(image: Image.Image, x: int, y: int) -> bool:
    return sum(_rgb(image, x, y)) < 200


def _rgb(image: Image.Image, x: int, y: int) -> tuple[int, ...]:
    pixel = image.getpixel((x, y))
    assert isinstance(pixel, tuple)
    return pixel


def _bars_crossing(image: Image.Image, column: int, rows: range) -> int:
    """Runs of coloured (not grey) pixels down ``column`` within ``rows``: the bars drawn there."""
    coloured = [len(set(_rgb(image, column, y))) > 1 for y in rows]
    return sum(1 for i, c in enumerate(coloured) if c and (i == 0 or not coloured[i - 1]))


def _workers_running_at(step: StepReplay, policy: str, seconds: float) -> int:
    run = step.runs[(policy, False)]
    return len({i.worker_id for i in run.result.items if i.start_s < seconds < i.end_s})


def test_a_worker_s_last_trajectory_is_drawn_among_64_concurrent_ones() -> None:
    config = ReplayConfig(
        inventory=parse_workers("2xH100:64,2xAscend910B"),
        policies=POLICIES,
        steps=(3,),
        steal_modes=(False,),
        time_budget_s=0.2,
    )
    step = replay(synthetic_trace("short-cot", prompts=32, samples=4, steps=4, seed=1), config).steps[-1]
    first = step.runs[(POLICIES[0], False)].result
    ends = sorted(item.end_s for item in first.items)
    late = (ends[-3] + ends[-2]) / 2  # when only the last two trajectories still run
    expected = _workers_running_at(step, POLICIES[0], late)
    assert expected == 2  # each on its own H100

    image = Image.open(io.BytesIO(gantt_png(step, POLICIES, steal=False))).convert("RGB")
    longest = max(step.runs[(name, False)].result.makespan_s for name in POLICIES)
    x_max = max(longest, step.lower_bound_s) * 1.02  # gantt_png's axis
    column = _pixel_column(image, late, x_max)
    first_panel = range(image.size[1] // 2)  # two panels, one above the other
    assert _bars_crossing(image, column, first_panel) == expected
