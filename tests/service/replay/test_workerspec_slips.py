"""What a malformed ``--workers`` part is told it missed (``service.workerspec``'s slips of form).

``test_workerspec.py`` holds that a slip of form is refused as malformed, not as an unknown device.
The reason also names the slip, so the user sees which part of ``COUNTxDEVICE`` to fix, and a part
that matches no form at all is told only the form (mutation testing, helper mutants63).
"""

from __future__ import annotations

import pytest

from scheduler.errors import InvalidInputError, UnknownNameError
from service.workerspec import FORM, parse_workers


@pytest.mark.parametrize(
    ("spec", "missed"),
    [
        ("8x", "a count with no device"),
        ("8", "a count with no device"),
        ("x", "no count and no device"),
        ("X", "no count and no device"),
        ("xH100", "an x with no count before it"),
        ("x910b", "an x with no count before it"),
        ("H100x8", "the count goes before the device"),
        ("910bX16", "the count goes before the device"),
    ],
)
def test_a_slip_of_form_names_what_the_part_missed(spec: str, missed: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_workers(spec)
    assert not isinstance(caught.value, UnknownNameError)
    assert caught.value.reason == f"malformed ({missed}); expected {FORM}"


@pytest.mark.parametrize("spec", ["8yH100z!", ":64", "8xH100:abc"])
def test_a_part_of_no_form_is_told_only_the_form(spec: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_workers(spec)
    assert caught.value.reason == f"malformed; expected {FORM}"


@pytest.mark.parametrize("spec", ["H100x", "TPUx8", "xTPU"])
def test_a_trailing_or_leading_x_beside_no_known_device_is_an_unknown_device(spec: str) -> None:
    # "H100x" has no count for "the count goes before the device" to be about; "TPUx8" and "xTPU"
    # name no device, so the device list is what the user needs
    with pytest.raises(UnknownNameError):
        parse_workers(spec)
