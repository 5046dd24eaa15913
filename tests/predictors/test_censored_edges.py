"""``raise_censored`` reads two figures of a prompt's cut samples: the largest cap they were cut under
(``trunc_cap``) and the largest length they reached (``trunc_len``). They differ where a sample was
cut short of its cap (the context window ended first). A partly cut prompt's p90 is held at the
length reached, what is known to lie under its 90th percentile, not at the cap nothing ran to; and
a prompt whose cut samples reached no length at all (``trunc_len`` 0) tells nothing of the lengths
past the cut: neither quantile is raised, however many were cut."""

from __future__ import annotations

import numpy as np

from predictors.censored import raise_censored


def test_a_partly_cut_prompts_p90_is_held_at_the_length_its_cut_samples_reached_not_their_cap() -> None:
    p50, p90, cap, share = np.array([400.0]), np.array([600.0]), np.array([8000]), np.array([0.2])
    _, got90 = raise_censored(p50, p90, cap, share, np.array([1000.0]), np.array([900.0]))  # cut at 900
    assert got90.tolist() == [900.0]


def test_a_prompt_whose_cut_samples_reached_no_length_is_not_raised() -> None:
    p50, p90 = np.full(2, 400.0), np.full(2, 600.0)
    share = np.array([0.2, 0.5])  # partly cut, mostly cut
    got50, got90 = raise_censored(p50, p90, np.full(2, 8000), share, np.full(2, 1000.0), np.zeros(2))
    assert (got50.tolist(), got90.tolist()) == ([400.0, 400.0], [600.0, 600.0])
