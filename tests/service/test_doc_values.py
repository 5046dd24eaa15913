"""The values the docs give, held to the code: an operator configures the service from the docs alone.

tests/test_doc_references.py checks that the names the docs give exist; these check what they say of
them, where that can be read mechanically: each setting's default in the README's table, the default a
command synopsis shows in brackets (``[--repeats 5]``), the status each problem type answers, and
the log lines the runbook and the sidecar's, API's and client's pages quote."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup

from service.problems.table import PROBLEMS
from service.settings import Settings
from tests.service.cli_docs import command_lines, command_tree, doc_files, resolve, top_commands
from tests.service.errors_doc import errors_table

ROOT = Path(__file__).resolve().parents[2]
_ROW = re.compile(r"^\| (`(?:ROLLOUT_|REDIS_)[^|]*?) \| ([^|]*?) \|", re.MULTILINE)
_BRACKET = re.compile(r"\[(--[a-z0-9-]+)[ =]([^\]\[| ]+)")


def readme_defaults() -> dict[str, str]:
    """The README's settings table: each variable -> the default its row gives (``unset`` for none).
    A row naming several variables gives their defaults in order (``127.0.0.1``, ``8000``), or one for
    all; a variable's other spelling in parentheses (``ROLLOUT_REDIS_URL``) is not a row of its own."""
    found: dict[str, str] = {}
    for names, defaults in _ROW.findall((ROOT / "README.md").read_text()):
        variables = re.findall(r"`((?:ROLLOUT_|REDIS_)[A-Z_]+)`", names.split(" (", 1)[0])
        values = [value.strip(" `") for value in defaults.split(",")]
        for index, variable in enumerate(variables):
            found[variable] = values[index] if len(values) == len(variables) else defaults.strip(" `")
    return found


def field_of(variable: str) -> str:
    """The settings field a variable sets (``REDIS_URL`` keeps the name every Redis tool uses)."""
    return "redis_url" if variable == "REDIS_URL" else variable.removeprefix("ROLLOUT_").lower()


def says(written: str, default: object) -> bool:
    """Whether a doc's ``written`` default is ``default``: ``unset`` for None, ``true``/``false`` for a
    flag, a number by value (``30`` is 30.0), anything else as written."""
    if default is None:
        return written == "unset"
    if isinstance(default, bool):
        return written == str(default).lower()
    if isinstance(default, int | float):
        return re.fullmatch(r"-?[0-9.]+", written) is not None and float(written) == default
    return written == str(default)


def test_the_readme_gives_every_setting_the_default_the_settings_model_has() -> None:
    documented = readme_defaults()
    assert sorted(field_of(variable) for variable in documented) == sorted(Settings.model_fields)
    wrong = {
        variable: (written, Settings.model_fields[field_of(variable)].default)
        for variable, written in documented.items()
        if not says(written, Settings.model_fields[field_of(variable)].default)
    }
    assert wrong == {}


def test_a_wrong_readme_default_is_caught() -> None:
    """The check above can fail: a row claiming a 60 s lease reads as not the model's 30,000 ms."""
    assert not says("60000", Settings.model_fields["lease_ttl_ms"].default)
    assert not says("unset", Settings.model_fields["host"].default)
    assert says("30", Settings.model_fields["plan_queue_timeout_s"].default)


def _option_defaults(cli: typer.Typer) -> dict[tuple[str, ...], dict[str, object]]:
    """Each command path -> its options' spellings -> the option's default."""
    found: dict[tuple[str, ...], dict[str, object]] = {}

    def walk(command: object, path: tuple[str, ...]) -> None:
        params = [p for p in getattr(command, "params", []) if p.param_type_name == "option"]
        found[path] = {spelling: p.default for p in params for spelling in p.opts + p.secondary_opts}
        if isinstance(command, TyperGroup):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))

    walk(typer.main.get_command(cli), ())
    return found


def bracket_claims(text: str) -> list[tuple[str, str]]:
    """The ``[--flag VALUE]`` pairs of one command line, ``VALUE`` as written."""
    return _BRACKET.findall(text)


def test_every_value_a_synopsis_shows_in_brackets_is_that_option_default(cli: typer.Typer) -> None:
    """``[--drain-timeout 20]`` reads as "optional, 20 unless given"; an option with no default
    (``[--health-port 9102]``, ``[--device H100]``) may show an example instead."""
    tree = command_tree(cli)
    defaults = _option_defaults(cli)
    checked, wrong = 0, []
    for doc in doc_files():
        for line in command_lines(doc, top_commands(tree)):
            path = resolve(line.words, tree)
            for flag, written in bracket_claims(" ".join(line.words)):
                default = defaults[path].get(flag)
                if default is None or isinstance(default, bool):
                    continue
                checked += 1
                if not says(written, default):
                    wrong.append(f"{line.where}: {' '.join(path)} {flag} {written} (default {default!r})")
    assert checked > 30
    assert wrong == []


def test_a_bracketed_example_value_is_caught() -> None:
    """The check above can fail: solver.md's synopsis showed ``[--speed-spread 0.1]`` until
    2026-12-04, where the option's default is 0 (equal speeds)."""
    (claim,) = bracket_claims("bench solver [--repeats 5] [--speed-spread 0.1] [--json]")[1:]
    assert claim == ("--speed-spread", "0.1")
    assert not says(claim[1], 0.0)


def test_every_status_the_problem_table_answers_has_a_row_in_the_api_errors_table() -> None:
    rows = errors_table()
    answered = {problem.status for _, problem in PROBLEMS}
    assert sorted(answered - set(rows)) == []


def test_every_problem_type_the_errors_table_names_answers_the_status_of_its_row() -> None:
    """A type named in backticks in a row (``redis-too-old``) is one the table answers with that
    row's status, so an alert on the type and one on the status agree."""
    statuses = {problem.slug: problem.status for _, problem in PROBLEMS}
    named = [
        (slug, status)
        for status, when in errors_table().items()
        for slug in re.findall(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`", when)
        if slug in statuses
    ]
    assert len(named) >= 6
    assert [(slug, status) for slug, status in named if statuses[slug] != status] == []


_COMMANDS = "rollout-scheduler|kubectl|docker|curl|openssl|vllm|pip|valkey-cli|redis-cli"
_CODE = re.compile(rf"[=/(){{}}\[\]|$#]|^[A-Z]+ |^(?:{_COMMANDS}) ")
_FENCE = re.compile(r"^ *```.*?^ *```", re.MULTILINE | re.DOTALL)  # a code block, indented in a list too
# what a log line fills in (ids, counts, a version) and where one message is put inside another
_HOLE = re.compile(r"\.\.\.|<[^>]*>|\b[A-Z]\b|\S*[0-9]\S*|: ")
# quoted spans that are no log line: operations.md's sizing rule and aclfile line, delivery.md's item
# states and a lease's deadline
_FORMULAS = frozenset(
    {"steps per retention window x finished size", "user default off", "q r d f c", "now + lease_ttl_ms"}
)


def quoted_messages(text: str) -> list[str]:
    """The log lines and answers a runbook quotes: spans in backticks of three words or more that are
    not code, a command or a query (``redis: "unreachable: ..."`` is read as its quoted value), one
    the prose wraps onto the next line included, its line break read as a space."""
    found = []
    for span in re.findall(r"`([^`]+)`", _FENCE.sub("", text)):
        if "\n\n" in span:  # a backtick of a code span left open: the prose, not a quote
            continue
        span = re.sub(r'^[a-z_]+: "(.*)"$', r"\1", " ".join(span.split()))
        if len(span.split()) >= 3 and re.match(r"[A-Za-z]", span) and not _CODE.search(span):
            found.append(span)
    return [span for span in found if span not in _FORMULAS]


def fragments(message: str) -> list[str]:
    """The literal runs of a quoted message, around what the code fills in; of two words or more."""
    runs = (run.strip(" :;,.'\"") for run in _HOLE.split(message))
    return [run for run in runs if len(run.split()) >= 2]


# a name a Lua message starts with comes from its caller: ``died="its worker process"`` (Python's
# release, or ``died = "its engine"`` first) or ``hand_back(key, now, refunds, 'its sidecar', cfg)``
# (reset.lua), put before ``who .. ' died ...'``
_WHO = re.compile(r"""\bdied ?= ?["']([^"']+)["']|\bhand_back\((?:[^,()]+, ){3}'([^']+)'""")
_AFTER_WHO = re.compile(r"\bwho \.\. '([^']*)'")
_SUFFIX = re.compile(r"(?<=\w)%s")  # ``engine ready%s, claiming``: filled with " again", or nothing


def assembled(code: str) -> list[str]:
    """The messages Lua assembles around a name its callers pass in, each name put in: a quote of one
    (``its engine died holding it N times ...``) is written whole in no file."""
    names = sorted({python or lua for python, lua in _WHO.findall(code)})
    return [name + after for name in names for after in _AFTER_WHO.findall(code)]


def filled_formats(source: str) -> list[str]:
    """The format strings of a Python module's calls whose ``%s`` the call fills with a text of its
    own, once per text: ``("...: request closed, %s", ..., "reported failed" if alive else ...)``."""
    found = []
    for call in ast.walk(ast.parse(source)):
        if not (isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant)):
            continue
        form = call.args[0].value
        if isinstance(form, str) and "%s" in form:
            texts = [
                node.value
                for arg in call.args[1:]
                for node in ast.walk(arg)
                if isinstance(node, ast.Constant)
            ]
            found += [form.replace("%s", text) for text in texts if isinstance(text, str)]
    return found


def written_lines(code: str, python: list[str] | None = None) -> str:
    """What the code can log or answer, as text to find a quote's runs in: the code itself, each
    format string with its word suffixes left empty (``engine ready%s, claiming`` logs ``engine
    ready, claiming`` at start), the messages Lua assembles around its callers' names, and the
    formats of the ``python`` modules filled with the texts their calls pass."""
    filled = [line for source in python or [] for line in filled_formats(source)]
    return "\n".join([code, _SUFFIX.sub("", code), *assembled(code), *filled])


@functools.cache
def _written() -> str:
    """``written_lines`` of service/, scheduler/ and predictors/ (their Python and Lua)."""
    python = [
        path.read_text()
        for part in ("service", "scheduler", "predictors")
        for path in (ROOT / part).rglob("*.py")
    ]
    lua = [path.read_text() for path in (ROOT / "service").rglob("*.lua")]
    return written_lines("\n".join([*python, *lua]), python)


# client.md's table of the client's TypeErrors (``token: expected a str, got int``): each is built
# from the argument's name, what it takes and the type it got (``service.client.args.refused``), so no
# literal run of it is in the code; test_client_arguments raises each one the table quotes instead
_ARGUMENT_REFUSED = re.compile(r"^[a-z_]+: expected .+, got \w+$")

# a doc's quotes of the lines an operator greps for, and how many it quotes at least (so a quote
# reworded out of the reader's sight, in a span the check no longer reads, is seen)
_QUOTING = {"operations.md": 16, "sidecar.md": 15, "api.md": 4, "client.md": 1, "delivery.md": 4}


@pytest.mark.parametrize("doc", sorted(_QUOTING))
def test_every_log_line_a_doc_quotes_is_one_the_code_writes(doc: str) -> None:
    """An operator greps for, or alerts on, the lines the runbook and the sidecar's, API's and
    delivery protocol's pages quote (``reaper pass failed``), a trainer's integrator for the client's:
    each literal run of one (around the ids and counts filled in) is in the code that logs or answers
    it."""
    lines = _written()
    messages = [
        m for m in quoted_messages((ROOT / "docs" / doc).read_text()) if not _ARGUMENT_REFUSED.match(m)
    ]
    assert len(messages) >= _QUOTING[doc]
    assert [(m, run) for m in messages for run in fragments(m) if run not in lines] == []


def test_a_quote_of_a_line_lua_assembles_or_a_format_leaves_unfilled_is_found_and_a_wrong_one_not() -> None:
    """The forms the check above is taught: the dead letter ``release.lua`` writes for an item whose
    engine died under it at every run, and the sidecar's line as an engine first answers."""
    code = "\n".join(
        [
            'died = "its engine" if crashed else ""',
            "local how = hand_back(key, now, refunds, 'its sidecar', cfg)",
            "bury(key, now, who .. ' died holding it ' .. n .. ' times')",
            'log.info("engine ready%s, claiming", again)',
        ]
    )
    assert assembled(code) == ["its engine died holding it ", "its sidecar died holding it "]
    lines = written_lines(code)
    assert [run in lines for run in ("its engine died holding it", "engine ready, claiming")] == [True, True]
    assert [run in lines for run in ("its pod died holding it", "engine up, claiming")] == [False, False]


def test_a_quote_of_a_format_filled_with_a_text_its_call_passes_is_found_and_a_wrong_one_not() -> None:
    """The sidecar's warning for an item held past the engine hang bound ends with what was done."""
    source = 'log.warning("item %s: request closed, %s", key, "reported failed" if alive else "released")'
    lines = written_lines("", [source])
    assert [run in lines for run in ("request closed, reported failed", "request closed, released")] == [
        True,
        True,
    ]
    assert "request closed, requeued" not in lines


def test_a_quoted_line_is_split_around_what_the_code_fills_in() -> None:
    assert fragments("completion of K refused: schedule S is gone from Redis; result dropped") == [
        "completion of",
        "is gone from Redis; result dropped",
    ]
    assert quoted_messages('`redis: "unreachable: ..."` and `kubectl rollout restart deployment/x`') == []
    assert quoted_messages("`reaped expired leases of <workers>`") == ["reaped expired leases of <workers>"]
    wrapped = "one warning (`the earlier sidecar of this\n  worker id is gone`), then"
    assert quoted_messages(wrapped) == ["the earlier sidecar of this worker id is gone"]
    assert quoted_messages("```sh\nkubectl rollout restart\n```\n\n  ```\nsidecar x y z\n  ```\n") == []
