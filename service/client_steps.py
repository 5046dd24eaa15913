"""The client's guard against reporting a step that did not run to its end as the predictor's history.

A step cancelled before it finished, or one still running, has results only for the trajectories
that finished first: the short ones, since the long ones were still queued or decoding. Reported as
actuals they teach the predictor a length distribution biased short (found live: one such report
moved the mean prediction from 588 to 457 tokens, for several steps). ``SchedulerClient.
report_results`` therefore refuses such a step before it sends anything (``PartialStepError``),
unless called with ``partial=True``; the service refuses a cancelled one too (409
``step-cut-short``), whatever client reports it.
"""

from __future__ import annotations

from service.api.progress_schemas import ProgressResponse


class PartialStepError(ValueError):
    """``report_results`` of a step cancelled before it finished, or not finished yet: nothing was
    reported. ``partial=True`` reports its results anyway."""

    def __init__(self, progress: ProgressResponse) -> None:
        self.schedule_id = progress.schedule_id
        super().__init__(
            f"schedule {progress.schedule_id!r} {_why(progress)}: its {progress.done} results are the "
            "trajectories that finished first, the short ones, and would teach the predictor lengths "
            "biased short; nothing was reported (pass partial=True to report them anyway)"
        )


def check_whole(progress: ProgressResponse) -> None:
    """``PartialStepError`` unless every trajectory of the step finished (done or dead-lettered)."""
    if progress.cancelled or progress.done + progress.failed < progress.total:
        raise PartialStepError(progress)


def _why(progress: ProgressResponse) -> str:
    """What cut the step short, in words."""
    if progress.cancelled:
        return f"was cancelled with {progress.cancelled} of its {progress.total} trajectories unfinished"
    return (
        f"has not finished ({progress.queued} queued and {progress.running} running "
        f"of its {progress.total} trajectories)"
    )
