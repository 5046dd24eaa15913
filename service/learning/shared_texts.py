"""One string object per distinct text read from the actuals stream (prompt ids, text feature values).

``json.loads`` makes a new string for every value it reads, and the history keeps each row's prompt
id (and text features) for as long as it holds the row: a million rows of a few prompts would hold
a million copies. Its own module so both readers of a page (``service.learning.actuals``'s entry by
entry, ``service.learning.actuals_page``'s columns at once) share one table.
"""

from __future__ import annotations

from collections.abc import Mapping

# Distinct texts (prompt ids, text feature values) the history's parse keeps one string object for.
# Every row used to hold its own copy of its prompt id (~52 bytes each: ~100 MB at the 2M-row cap,
# where a prompt's n samples, and its later epochs, all name the same id). The table is cleared when
# it passes this size, so it never holds ids the history trimmed for long: 65,536 ids ~6 MB at most.
SHARED_TEXTS = 1 << 16


class SharedTexts:
    """One string object per distinct text, so a million rows of a few prompts hold a few ids.

    ``json.loads`` makes a new string for every value it reads, and the history keeps each row's
    prompt id (and text features) for as long as it holds the row. Why not ``sys.intern``: interned
    strings are immortal on Python 3.12.0-3.12.5 and free-threaded builds, and a run's prompt ids are
    unbounded, so every id the history ever trimmed would stay. This table is bounded instead
    (``limit`` entries, then it starts afresh: rows read afterwards share a new object per text,
    never more than one object per row as before).
    """

    def __init__(self, limit: int = SHARED_TEXTS) -> None:
        self.limit = limit
        self._held: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        """The object held for ``text`` (``text`` itself the first time it is met)."""
        held = self._held.get(text)
        if held is None:
            if len(self._held) >= self.limit:
                self._held.clear()
            held = self._held[text] = text
        return held

    def __len__(self) -> int:
        return len(self._held)

    def features(self, features: Mapping[str, float | str]) -> Mapping[str, float | str]:
        """A report's features with each text value shared (anything not a dict as it was read)."""
        if not isinstance(features, dict):
            return features
        return {k: self(v) if isinstance(v, str) else v for k, v in features.items()}
