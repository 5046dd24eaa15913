"""``serve`` whose app's startup fails exits 3, uvicorn's startup failure, not 0.

Why. ``serve`` runs uvicorn's server itself (``service.serving.CountingServer``, whose stop signals
count toward the third) where it called ``uvicorn.run``. A supervisor (systemd, Kubernetes) reads the
status: 0 is a stop in order, and a replica that never came up must not read as one. uvicorn 0.55's
server raises ``SystemExit(3)`` itself at a failed startup (``Server.startup``); ``serve`` checks
``started`` after the run too, as ``uvicorn.run`` does, for a run that would return without serving
(none does in uvicorn 0.55: mutants54 found that check's removal changes no outcome). The child runs
the real ``serve`` with its real embedded Redis; only its app is one whose startup fails
(``lifespan.startup.failed``, as a startup that raised is told to uvicorn)."""

from __future__ import annotations

from pathlib import Path

from tests.service.api.serve_child import FAILING_STARTUP, MAIN, serve_child

WAIT_S = 120.0  # a bound against never, for a loaded host


def test_serve_whose_app_fails_its_startup_exits_3(tmp_path: Path) -> None:
    child = serve_child(FAILING_STARTUP + MAIN, ["serve", "--port", "0"], tmp_path)
    try:
        _, err = child.communicate(timeout=WAIT_S)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 3, err[-2000:]
    assert "Application startup failed" in err, err[-2000:]
