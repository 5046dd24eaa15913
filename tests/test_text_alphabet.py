"""``tests.text_alphabet.UTF8`` draws what ``st.text()``'s default alphabet draws: any character UTF-8
can carry, controls and the planes past the first included, and never a surrogate (which UTF-8
cannot encode). Checked without building hypothesis's codec table, which is what UTF8 is for."""

from __future__ import annotations

import unicodedata

from hypothesis import find, given, settings
from hypothesis import strategies as st

from tests.text_alphabet import UTF8

FOUND = settings(database=None, max_examples=2000)


@given(st.text(UTF8))
def test_every_text_drawn_is_utf8_and_reads_back_as_itself(text: str) -> None:
    assert text.encode("utf-8").decode("utf-8") == text
    assert all(unicodedata.category(c) != "Cs" for c in text)


def test_the_least_character_drawn_at_or_past_a_bound_steps_over_the_surrogates_only() -> None:
    def least(low: str) -> str:
        return find(UTF8, lambda c: c >= low, settings=FOUND)

    # U+D800-DFFF, the surrogates, are what is stepped over; U+D7FF and U+E000 either side are drawn
    assert [least("\ud7ff"), least("\ud800"), least("\uffff"), least("\U00010000")] == [
        "\ud7ff",
        "\ue000",
        "\uffff",
        "\U00010000",
    ]


def test_control_characters_are_drawn() -> None:
    assert unicodedata.category(find(UTF8, lambda c: c < " ", settings=FOUND)) == "Cc"
