"""A 422's ``field`` is cut (its first ``PATH_HEAD`` parts and its last ``PATH_TAIL``) only where
cutting shortens it: past ``MAX_ECHO`` characters, and with parts to leave out. A path of that many
parts or fewer is named whole however long (a few long keys: the cut form would name every part
again, and add the ellipsis and the count), as is one of exactly ``MAX_ECHO`` characters; and a name
that begins with a dot keeps it (only the path's own leading separator goes)."""

from __future__ import annotations

from service.problems.details import MAX_ECHO, PATH_HEAD, PATH_TAIL, field_path


def test_a_long_path_of_no_more_parts_than_the_cut_keeps_is_named_whole() -> None:
    names = ["k" * 40] * (PATH_HEAD + PATH_TAIL)  # 409 characters with its dots
    assert field_path(("body", *names)) == ".".join(names)


def test_a_path_of_exactly_the_echo_limit_is_named_whole_however_many_parts() -> None:
    names = [f"n{k:02d}" for k in range(PATH_HEAD + PATH_TAIL + 40)]  # 3 characters each, and a dot
    names[-1] += "x" * (MAX_ECHO - len(".".join(names)))
    whole = ".".join(names)
    assert (len(whole), field_path(("body", *names))) == (MAX_ECHO, whole)


def test_a_name_that_begins_with_a_dot_keeps_it() -> None:
    assert field_path(("body", ".hidden"), tagged=False) == ".hidden"
    assert field_path(("body", "sampling", ".hidden"), tagged=False) == "sampling..hidden"
