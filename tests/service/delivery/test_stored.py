"""``service.delivery.stored``'s pure helpers: what counts as unreadable text, where a refusal says
it is, and how long "logged once" remembers (bounded, so a deployment with many unreadable keys
does not grow a set for ever)."""

from __future__ import annotations

from service.delivery import stored

LONE = "\udcff"  # a stored 0xff byte, as a ``surrogateescape`` reply decodes it


def test_once_remembers_each_key_and_field_until_it_holds_the_bound_then_forgets_them_all() -> None:
    once = stored._Once()
    pairs = [(f"P:{i}:meta", "engine") for i in range(stored._LOGGED_MAX)]
    assert all(once.first(*pair) for pair in pairs)
    assert not any(once.first(*pair) for pair in pairs)  # at the bound: each still remembered
    assert once.first("P:past:meta", "engine")  # one past it: all forgotten, this one remembered
    assert once.first(*pairs[0])
    assert not once.first("P:past:meta", "engine")


def test_unreadable_field_names_the_first_unreadable_text_by_its_path() -> None:
    item = {
        "key": "a#0",
        "payload": {"prompt": "ok", "messages": [{"role": "user", "content": "ok"}, {"content": "x" + LONE}]},
    }
    assert stored.unreadable_field(item) == "payload.messages[1].content"
    assert stored.unreadable_field({"payload": {"prompt": LONE}}) == "payload.prompt"
    assert stored.unreadable_field([1, ["ok", LONE]]) == "[1][1]"


def test_unreadable_field_names_a_key_that_is_not_utf8_whatever_its_value() -> None:
    assert stored.unreadable_field({"extra": {"tag" + LONE: "ok"}}) == "extra.tag" + LONE


def test_unreadable_field_of_readable_text_is_none_and_of_a_bare_string_names_the_value() -> None:
    assert stored.unreadable_field({"payload": {"prompt": "héllo", "n": [1, 2.5, None, True]}}) is None
    assert stored.unreadable_field(LONE) == "(the value)"
