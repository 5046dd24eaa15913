"""``Lines`` numbers every offset as counting the newlines before it does (what the docs tests did
before, quadratically): a finding's ``file:line`` stays where a reader finds it."""

from __future__ import annotations

from tests.line_index import Lines


def test_every_offset_is_on_the_line_the_newlines_before_it_say() -> None:
    for text in ("", "\n", "one", "one\n", "\n\nthree\n```\nfive\n```\n\nlast line", "a\r\nb\n"):
        lines = Lines(text)
        assert [lines.of(at) for at in range(len(text) + 1)] == [
            text.count("\n", 0, at) + 1 for at in range(len(text) + 1)
        ], text
