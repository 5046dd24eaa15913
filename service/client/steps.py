"""The client's guard against reporting a step that did not run to its end as the predictor's history.

A step cancelled before it finished, or one still running, has results only for the trajectories
that finished first: the short ones, since the long ones were still queued or decoding. Reported as
actuals they teach the predictor a length distribution biased short (found live: one such report
moved the mean prediction from 588 to 457 tokens, for several steps). ``SchedulerClient.
report_results`` therefore refuses such a step before it sends anything (``PartialStepError``),
unless called with ``partial=True``; the service refuses a cancelled one too (409
``step-cut-short``), whatever client reports it.

``partial=True`` alone still reports, of a prompt whose group was cut, the samples that finished:
that prompt's short ones (DAPO's over-provisioned step, cancelled once enough groups are done, is
all such groups and whole ones). Given each prompt's group size, ``whole_groups`` keeps the prompts
whose every sample finished, whose lengths are that prompt's draws, and leaves out the cut ones,
which would teach the predictor that a long prompt is short.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from service.api.progress_schemas import ProgressResponse, ResultEntry


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


def whole_groups(results: Sequence[ResultEntry], sizes: int | Mapping[str, int]) -> list[ResultEntry]:
    """``results`` of the prompts with as many results as their group size (``sizes``: one for every
    prompt, or per prompt id; a prompt it does not name is kept); a cut group's samples are its short
    ones (module docstring). A size below 1 is a ``ValueError`` naming it."""
    per_prompt: dict[str, int] = {}
    for entry in results:
        per_prompt[_prompt_of(entry)] = per_prompt.get(_prompt_of(entry), 0) + 1
    wanted = {prompt: sizes if isinstance(sizes, int) else sizes.get(prompt) for prompt in per_prompt}
    for prompt, size in wanted.items():
        if size is not None and size < 1:
            raise ValueError(f"group_sizes[{prompt!r}]={size!r}: a group holds at least 1 sample")
    return [
        e for e in results if (size := wanted[_prompt_of(e)]) is None or per_prompt[_prompt_of(e)] >= size
    ]


def _prompt_of(entry: ResultEntry) -> str:
    """The prompt id of a result (split from its key by a service from before ``prompt_id``)."""
    return entry.prompt_id if entry.prompt_id is not None else entry.key.rpartition("#")[0]
