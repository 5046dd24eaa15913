"""The whole loop runs under the users ``rollout-scheduler redis-acl`` prints, and Redis refuses nothing.

``ACL LOG`` records every command, key or login Redis refused, including those a client swallows
(redis-py ignores a refused ``CLIENT SETINFO``) and those inside our Lua scripts, which Redis 7 checks
against the calling user. An empty log after the loop (``tests/deploy/acl_loop.py``) says the
definition in ``service/delivery/acl.py`` covers every command the service and the sidecars send
on these paths; the Lua they may run on others is held to it by ``test_redis_acl_definition.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from tests.deploy.acl_loop import LoopOutcome, acl_cluster, acl_server, generated_lines, run_loop


@pytest.mark.parametrize("prefix", ["rs", "tenant-a"])
def test_the_whole_loop_runs_as_the_generated_users_and_redis_refuses_nothing(
    cli: typer.Typer, prefix: str, tmp_path: Path
) -> None:
    with acl_server(generated_lines(cli, "--prefix", prefix)) as acl:
        outcome = run_loop(acl, prefix, tmp_path)
        refused = acl.refusals()
        keys = acl.keys()
    assert refused == []
    _ran_the_whole_loop(outcome)
    assert keys
    assert all(key.startswith(f"{prefix}:") for key in keys)


@pytest.mark.slow
def test_on_a_redis_cluster_the_cluster_lines_run_the_whole_loop_refusing_nothing(
    cli: typer.Typer, tmp_path: Path
) -> None:
    """``--cluster`` adds what a cluster client reads when built (the slot map, the command table)."""
    with acl_cluster(generated_lines(cli, "--cluster")) as acl:
        outcome = run_loop(acl, "rs", tmp_path)
        refused = acl.refusals()
    assert refused == []
    _ran_the_whole_loop(outcome)


def _ran_the_whole_loop(outcome: LoopOutcome) -> None:
    """The loop ran what it claims: every path the ACL must cover was taken."""
    assert outcome.done == outcome.total == 18
    assert outcome.stolen > 0  # planned for the worker without a sidecar: every one of them stolen
    assert outcome.stats["sidecar-w-pull"]["failed"] == 1  # and run again elsewhere: 18 done
    assert outcome.cancelled == 2
    assert outcome.stats["sidecar-w-push-2"]["reset"] == 2  # the killed sidecar's leases, handed back
    assert outcome.retrained.startswith("v")


@pytest.mark.slow
def test_a_sidecar_user_short_of_a_command_it_sends_shows_in_the_acl_log(
    cli: typer.Typer, tmp_path: Path
) -> None:
    """The check above has teeth: without EVAL (its presence release at stop, best effort, so the loop
    still ends well) the sidecar user's refusal is in the log."""
    lines = [
        line.replace(" +eval ", " ") if line.split()[2] == "rollout-sidecar" else line
        for line in generated_lines(cli)
    ]
    with acl_server(lines) as acl:
        outcome = run_loop(acl, "rs", tmp_path)
        refused = {(entry["username"], entry["object"]) for entry in acl.refusals()}
    assert outcome.done == outcome.total
    assert refused == {("rollout-sidecar", "eval")}
