"""A stop signal that lands between a refusal's raise and the command's ``except`` changes nothing:
the console script exits with the refusal's status (2, or 70 for a loop's death) and its line, not 0
with a clean stop's zero counters ("stopped before the run").

The early handlers (``early_stop``) raise ``StoppedBeforeRunError`` wherever a signal meets them, and
so raised it over a refusal on its way out: in push mode a Redis that refuses our credentials is
raised before the run's loop, through the health server's stop (a poll of up to 50 ms) in a
``finally``; a port taken, a refused flag, a loop's death alike (signals46 left the gap). Each test
sends SIGTERM from a hook inside that window (a ``finally`` the refusal passes through, or the health
server's stop), so the signal meets it every time, not by timing.
"""

from __future__ import annotations

import os
import signal
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from service import cli
from service.commands import sidecar as sidecar_command
from service.commands import sidecar_checks
from service.ports import free_port
from service.redis_conn import RedisRefusedError, RedisTooOldError
from service.sidecar import launch
from service.sidecar.health import HealthServer
from service.sidecar.supervision import LoopDiedError
from tests.service.interrupt import handlers_kept
from tests.service.sidecar.command_run import ARGS, PULL_ARGS, STOP, signalled_on_the_way_out


def _console_script(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[object, str, str]:
    """The console script's entry run on ``args``: its exit status, stdout and stderr (this process's
    own handlers put back after)."""
    monkeypatch.setattr(sys, "argv", ["rollout-scheduler", *args])
    capsys.readouterr()
    with handlers_kept(STOP):
        try:
            cli.main()
        except SystemExit as exited:
            out, err = capsys.readouterr()
            return exited.code, out, err
    pytest.fail("the command returned without an exit status")


def test_a_stop_during_the_health_server_s_stop_after_redis_refused_us_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Push mode: credentials refused before the run's loop; the SIGTERM lands in ``run_push``'s
    ``finally`` as it stops the health server."""

    def refused(*_: Any, **__: Any) -> Any:
        raise RedisRefusedError("Redis at r refused our credentials")

    stop = HealthServer.stop

    def stopped_with_a_signal(self: HealthServer) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        stop(self)

    monkeypatch.setattr(launch, "connected", refused)
    monkeypatch.setattr(HealthServer, "stop", stopped_with_a_signal)
    status, out, err = _console_script([*ARGS, "--health-port", str(free_port())], monkeypatch, capsys)
    assert (status, err.splitlines()[-1]) == (2, "sidecar: Redis at r refused our credentials")
    assert '"error": "Redis at r refused our credentials"' in out


def _taken(*_: Any, **__: Any) -> Any:
    """A bind of a port taken since the flags were checked (``sidecar_checks`` refuses one taken
    before): another process won it meanwhile."""
    raise OSError(98, "Address already in use")


@pytest.mark.parametrize("mode", ["push", "pull"])
def test_a_stop_as_a_taken_port_is_raised_exits_2(
    mode: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The health port (push) or the pull API's, taken; the SIGTERM lands as the bind's error leaves."""
    bind = signalled_on_the_way_out(_taken)
    if mode == "push":
        monkeypatch.setattr(HealthServer, "start", bind)
        args = [*ARGS, "--health-port", str(free_port())]
    else:
        monkeypatch.setattr(launch, "socket", SimpleNamespace(create_server=bind))
        args = [*PULL_ARGS, str(free_port())]
    status, out, err = _console_script(args, monkeypatch, capsys)
    assert (status, err.splitlines()[-1]) == (2, "sidecar: cannot listen: [Errno 98] Address already in use")
    assert '"error"' in out


def test_a_stop_as_a_flag_is_refused_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sidecar_command, "checked", signalled_on_the_way_out(sidecar_checks.checked))
    status, out, err = _console_script([*ARGS, "--idle-poll", "0"], monkeypatch, capsys)
    assert (status, out) == (2, "")
    assert err.splitlines()[-1] == "sidecar: idle-poll=0.0: must be >= 0.001"


RAISED: dict[str, tuple[BaseException, int]] = {
    "loop-died": (LoopDiedError("heartbeat loop", ZeroDivisionError("division by zero")), 70),
    "too-old": (RedisTooOldError("Redis at r is 6.0, older than 7.0"), 2),
}


@pytest.mark.parametrize("mode", ["push", "pull"])
@pytest.mark.parametrize("name", RAISED)
def test_a_stop_as_a_run_raises_keeps_its_status(
    name: str, mode: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run (either mode's) raising through a ``finally`` where the SIGTERM lands."""
    error, expected = RAISED[name]

    def raises(*_: Any) -> Any:
        raise error

    monkeypatch.setattr(launch, f"run_{mode}", signalled_on_the_way_out(raises))
    args = [*PULL_ARGS, str(free_port())] if mode == "pull" else ARGS
    status, out, err = _console_script(args, monkeypatch, capsys)
    assert (status, err.splitlines()[-1]) == (expected, f"sidecar: {error}")
    assert '"error"' in out
