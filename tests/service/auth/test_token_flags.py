"""A token a header cannot carry is refused up front, in one line, before anything is sent or started."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from service.auth.tokens import RULE, TOKEN_VARIABLE
from service.client import SchedulerClient

TOKEN = "tökén"


@pytest.mark.parametrize(
    ("args", "prefix"),
    [
        (["trace", "push", "unread.csv", "--url", "http://127.0.0.1:9"], "trace: --token: "),
        (["bench", "service"], "bench service: --token: "),
    ],
)
def test_a_non_ascii_token_flag_is_one_line_and_exit_status_2(
    cli: typer.Typer, args: list[str], prefix: str
) -> None:
    result = CliRunner().invoke(cli, [*args, "--token", TOKEN])
    assert result.exit_code == 2
    assert result.stderr.strip() == prefix + RULE
    assert TOKEN not in result.output


@pytest.mark.parametrize(
    ("args", "prefix"),
    [
        (["trace", "push", "unread.csv", "--url", "http://127.0.0.1:9"], "trace: --token: "),
        (["bench", "service", "--url", "http://127.0.0.1:9"], "bench service: --token: "),
    ],
)
def test_a_command_reads_its_token_from_scheduler_token_so_that_ps_need_not_show_it(
    cli: typer.Typer, args: list[str], prefix: str
) -> None:
    result = CliRunner().invoke(cli, args, env={TOKEN_VARIABLE: TOKEN})
    assert (result.exit_code, result.stderr.strip()) == (2, prefix + RULE)  # the variable's token, checked


def test_the_client_refuses_a_non_ascii_token_by_the_rule_not_an_encoding_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="printable ASCII") as refused:
        SchedulerClient(f"file://{tmp_path}", token=TOKEN)
    assert not isinstance(refused.value, UnicodeError)


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "http://[::1"])
def test_a_bench_service_url_that_names_no_http_service_is_one_line_and_exit_status_2(
    cli: typer.Typer, url: str
) -> None:
    result = CliRunner().invoke(cli, ["bench", "service", "--url", url])
    assert result.exit_code == 2, result.output  # not 1 (unreachable), nor a traceback
    assert result.stderr.strip().startswith("bench service: url=")
    assert result.stderr.strip().count("\n") == 0
