"""Shared fixtures: a real Redis-compatible server (never a mock) and the path to the shared real data."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import typer
from hypothesis import HealthCheck, settings

from service.embedded import EmbeddedServer
from service.pipeline.step_keeper import StepKeeper
from service.ports import share_range
from tests.collector_kept import collector_unfrozen
from tests.logging_kept import logging_kept
from tests.rewrite_ahead import is_xdist_controller, modules_to_rewrite, rewrite_ahead
from tests.scope_costs import loadscope_longest_first
from tests.threads_kept import owned_by_session, threads_ended

# The real 3-master cluster's fixtures (``redis_cluster``, ``cluster_client``) live beside ``LocalCluster``
# in tests/cluster.py, a plugin named here so tests/deploy and tests/service/api both find them.
# tests/worker_end.py leaves an xdist worker whose session has finished deaf to execnet's SIGINT.
pytest_plugins = ("tests.cluster", "tests.worker_end")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

# Hypothesis's two clocks off for every property: its 200 ms deadline per example and its
# ``too_slow`` health check (input generation past 1 s) measure the host, not the property, and
# failed test_wire at load 40 on 2 cores beside other helpers' work (docs/experiments.md, "Flaky
# tests"). A property that is slow is a benchmark's to notice; a test's to check is what holds.
settings.register_profile("unclocked", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("unclocked")


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``make test`` runs ``-n``), give each worker its own slice of the ports
    ``free_port`` picks from: workers start servers at once, and two must never pick one port."""
    worker = getattr(config, "workerinput", None)  # set in xdist workers only
    if worker is not None:
        share_range(int(worker["workerid"].removeprefix("gw")), int(worker["workercount"]))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Under ``-n``, the test modules' asserts rewritten once into pytest's cache before the workers
    start (``tests.rewrite_ahead``), where each worker would otherwise rewrite every one of them."""
    if is_xdist_controller(session.config):
        rewrite_ahead(session.config, modules_to_rewrite(session.config))


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown where the plugin is absent
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope`` with tests/scheduler's modules that plan on the budget's clock in one
    scope, so in one worker, and the scopes handed out longest first (``tests.scope_costs``).

    Those planner tests plan within a wall-clock budget: two at once on 2 cores each get half the
    time and may answer differently (docs/experiments.md, "CI time"). The planner's other modules
    (``tests.scope_costs.OFF_THE_CLOCK``: validation, the simulator, frozen-clock plans; checked by
    tests/scheduler/conftest.py) answer the same at any load, so they spread like any module: one
    scope holding all ~990 tests was the suite's critical path (docs/experiments.md, ci53 and ci53b).
    The rest mostly wait, one module per scope as loadscope does: a module-scoped fixture
    (two replicas, a compose loop) starts once and its tests keep their order. Not ``loadgroup``:
    pytest-xdist 3.8 groups by rewriting ``item._nodeid``, which pytest 9.2 no longer reads.
    Longest first: xdist's own queue (most tests first) left scopes of a few 20-30 s tests to the end,
    the run finishing on one worker while the others sat idle.
    """
    if config.getvalue("dist") != "loadscope":
        return None
    return loadscope_longest_first(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any]) -> Iterator[None]:
    """The threads a session-scoped fixture starts (a server's, a cluster's) live for the session:
    ``_no_thread_left`` does not count them against the module that first asked for the fixture."""
    if fixturedef.scope != "session":
        yield
        return
    with owned_by_session():
        yield


@pytest.fixture(autouse=True, scope="module")
def _no_thread_left() -> Iterator[None]:
    """A module whose threads outlive it fails its last test, naming them (``tests.threads_kept``):
    modules run one after another in an xdist worker, and a thread one left ran on beside the next
    modules' tests, a process-wide one's (the cycle collector) among them (threads61).

    First of the module's fixtures, so its check runs after every other one's teardown."""
    with threads_ended():
        yield


@pytest.fixture(autouse=True)
def _logging_as_found() -> Iterator[None]:
    """Each test finds the process's logging as the one before it found it (``tests.logging_kept``):
    a command run in-process configures it for the whole process, as its console script must."""
    with logging_kept():
        yield


@pytest.fixture(autouse=True, scope="module")
def _collector_as_found() -> Iterator[None]:
    """No object is frozen past a test module (``tests.collector_kept``): an app started in-process
    froze the whole test process, whose objects, once dead in cycles, were never collected.

    Per module, not per test: each app's startup runs a full ``gc.collect()`` before its freeze, which
    scans every object a frozen process had set aside (~70 ms with the service imported, more beside
    pytest's); unfrozen after every test, every in-process app paid it, ~480 s more summed test time in
    the fresh-clone CI at 65a89a73 (the api modules that start an app a test grew most)."""
    with collector_unfrozen():
        yield


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """``REDIS_URL`` when set (any real server), else a session-wide embedded valkey-server."""
    env = os.environ.get("REDIS_URL")
    if env:
        yield env
        return
    with EmbeddedServer() as server:
        yield server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client on a flushed database, so each test starts from nothing."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def shared_data() -> Path:
    """The folder of real rollout data beside the checkout; skips the test cleanly where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture
def keeper() -> Iterator[StepKeeper]:
    """A step keeper of the test's own (the process's may be asleep for an earlier test's 15 s tick),
    whose thread ends with the test: what it still keeps is let go (a test's holds have no request
    to take them back), then ``settle`` ends it. Left, it ticked every 15 s into the next modules,
    for 3 h where a hold was never let go (threads61)."""
    own = StepKeeper()
    yield own
    own.let_go_all()
    own.settle(5.0)


@pytest.fixture
def driven_keeper() -> StepKeeper:
    """A step keeper with no thread: the test's own ``tick`` calls are its only ticks. The tests that
    count what one tick sends, or what it left, had the ``keeper`` fixture's, whose thread ticks a
    quarter margin (15 s) after the first ``hold``: on a loaded host the test's cluster set-up, stall
    and heal between its holds and its ``let_go`` outlasted that, and the thread's tick was counted
    with the test's (``test_keeper_master_stalled``: 5 keeps sent to the stalled master for 1, flaky62)."""
    return StepKeeper(ticks_itself=False)


@pytest.fixture(scope="session")
def cli() -> typer.Typer:
    """The root app with every command group attached (what the console script runs), for CliRunner."""
    from service.cli_app import _register, app

    if not any(g.name == "trace" for g in app.registered_groups):
        _register()  # once per session: registering twice would duplicate every command
    return app
