"""``UTF8``: the characters ``st.text()`` draws when given no alphabet (every code point UTF-8 can
carry: all but the surrogates), named by their Unicode category instead of by the codec.

Why not the default: hypothesis's default alphabet is ``characters(codec="utf-8")``, and for a codec
it builds a table by encoding each of the 1,114,112 code points, ~2 CPU-s in the first process that
draws text, written to ``.hypothesis/unicode_data`` for the next; a fresh clone has none, so every CI
run paid it. The categories' table, which every ``characters()`` builds, costs ~0.2. The two draw the
same code points (tests/test_text_alphabet.py), so a property's inputs are what they were.
"""

from __future__ import annotations

from hypothesis import strategies as st

UTF8 = st.characters(exclude_categories=["Cs"])  # st.text(UTF8, ...) draws as st.text(...) does
