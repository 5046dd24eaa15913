"""The ``rollout-scheduler`` console script's entry point (``main``): light on purpose.

The command line itself (Typer, every command group) is ``service.cli_app``, imported only once
``main`` has done what must come first. A ``sidecar`` arms its early stop handlers before that
import (``service/sidecar/early_stop.py``): the root CLI's imports and the command's own took
0.6-0.8 s on the 2-core dev host, and a SIGTERM then killed the process by the signal (status -15,
143 to Kubernetes: a crash), where one a moment later stopped it cleanly (exit 0, counters line).
What is left unguarded is the interpreter's own start and this module's import: 20-40 ms on that
host at load 7, 200-300 ms at load 15-18, nearly all of it the interpreter and ``site``, which no
entry point runs before (docs/sidecar.md).

``serve`` installs its own handlers of those signals (``exit_cleanly``: exit 0, the embedded server
stopped) before anything else too: its command installed them only once it had imported the app
(6-17 s at load 11-15 on the 2-core dev host, nearly all of it ``service.app``'s imports), and a SIGTERM
then (a ``docker compose stop`` or a pod deleted as it starts) killed it by the signal, 143 (exit51,
docs/operations.md, "Shutdown"). Nothing was started by then, so nothing was left behind: the status
was what was lost.
"""

from __future__ import annotations

import atexit
import signal
import sys
import threading

# the root context's ``obj`` where ``main`` runs a command: the process ends with it
OWNS_PROCESS = "owns-process"
SECOND_SIGNAL_LOG = "second stop signal: the exit goes on within its bound; a third ends it now"
# The first stop signal heard once an exit no stop signal began is under way (``exit_begun``)
UNSIGNALLED_EXIT_LOG = "stop signal during an exit already under way: it goes on; a third ends it now"
# The stop signals ``serve`` has heard, by ``exit_cleanly`` or by uvicorn's handler during its run (one
# count, ``heard_while_serving``): the first exits, the third forces.
_heard = 0
_begun = False  # the exit is under way, whatever began it (``exit_begun``): no signal starts it again


def main() -> None:
    """Console-script entry point: run the command line (``service.cli_app.run``); a ``sidecar``
    hears SIGTERM and SIGINT from its first line (``early_stop``), as a stop asked before its run; a
    ``serve``, its own handlers (``exit_cleanly``), which its last ``atexit`` hook ends where the exit
    guard does not (``_decided_at_the_end``). httpx's own command line is left out (``_no_httpx_cli``)."""
    if sys.argv[1:2] == ["serve"]:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, exit_cleanly)
        atexit.register(_decided_at_the_end)
    _no_httpx_cli()
    if sys.argv[1:2] != ["sidecar"]:
        from service.cli_app import run

        run()
        return
    from service.sidecar import early_stop

    early_stop.arm()
    try:
        from service.cli_app import run

        run()
    except early_stop.StoppedBeforeRunError as stopped:  # before the command's own catch took over
        from service.commands.sidecar import stopped_before_run

        stopped_before_run(_flag(sys.argv[2:], "--worker-id"), stopped.signal_name)


def _no_httpx_cli() -> None:
    """Keep httpx's own command-line client out of this process: httpx's ``__init__`` imports it
    (``httpx._main``: click, rich, pygments) whenever those are installed, as they are beside typer,
    and no command of ours runs it. It was ~0.15 of a push sidecar's ~0.75 CPU-s of imports (ci60b,
    docs/experiments.md). A ``None`` in ``sys.modules`` makes that import fail, and httpx then defines
    a ``main`` that says its CLI is missing; its clients are untouched. The trainer's library
    (``service.client``) is not changed: only the console script's processes skip it."""
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "not importable"


def exit_cleanly(signum: int, frame: object) -> None:
    """``serve``'s handler of SIGINT and SIGTERM, before and after uvicorn's own (which runs its
    graceful stop, and counts what it hears with these: ``heard_while_serving``): exit 0 by
    ``SystemExit``, which unwinds whatever runs and runs the ``atexit`` hooks, the embedded server's
    stop among them (no orphan process). A signal's default action would kill the process by it (-15).

    Only the first signal it hears starts the exit, and only where none has begun (``exit_begun``);
    another is logged (``UNSIGNALLED_EXIT_LOG``, ``SECOND_SIGNAL_LOG``), and the third ends the process
    now (``exit_guard.force``: the last acts, status 70). A second that raised again cut the exit
    where it waited: the join of a thread stuck on Redis, the embedded server's stop, the exit
    guard's decision, and the process ended 0 where its bound would have said 70, an embedded server
    left running where a third cut its stop again (exit52)."""
    del frame
    global _heard
    _heard += 1
    if _heard == 1 and not _begun:
        raise SystemExit(0 if signum in (signal.SIGINT, signal.SIGTERM) else 1)
    _after_the_first(signum)


def heard_while_serving(signum: int) -> None:
    """uvicorn's handler heard ``signum`` during ``serve``'s run (its graceful stop is uvicorn's):
    counted with ``exit_cleanly``'s, so that a third stop signal ends the process whichever handler
    heard the others. Counted apart, the signals uvicorn heard were one to ``exit_cleanly`` (uvicorn
    raised them again as its run ended, and the first one's exit cut the rest): a Ctrl-C pressed three
    times during uvicorn's wait for requests in flight forced nothing, nor did a fourth, and the exit
    ran its waits to its bound where ``SECOND_SIGNAL_LOG`` had said a third ends it (exit53). uvicorn
    no longer raises them again (``service.serving.CountingServer.capture_signals``)."""
    global _heard
    _heard += 1
    if _heard > 1:
        _after_the_first(signum)


def exit_begun() -> None:
    """``serve``'s exit is under way, begun by whatever began it: a stop signal (counted already),
    uvicorn's failed startup (``SystemExit(3)``), a crash (an exception, 1), a run that returned. A
    stop signal from here on is no first that starts the exit: it is logged and the exit goes on, the
    third forces it. Taken for the first, it raised ``SystemExit(0)`` where the exit's cleanup ran, in
    the embedded server's stop (an ``atexit`` act): the stop cut before its reap, ``Exception ignored
    in atexit callback`` and its traceback printed, the status left 3 (review54, exit55)."""
    global _begun
    _begun = True


def _after_the_first(signum: int) -> None:
    """A stop signal that starts no exit: the first one heard in an exit already under way
    (``UNSIGNALLED_EXIT_LOG``) and the second (``SECOND_SIGNAL_LOG``) are logged, the third and later
    ones end the process (``exit_guard.force``)."""
    name = signal.Signals(signum).name
    if _heard <= 2:
        import logging

        line = SECOND_SIGNAL_LOG if _heard == 2 else UNSIGNALLED_EXIT_LOG
        logging.getLogger("service.shutdown").warning(line, extra={"signal": name})
        return
    from service.api import exit_guard

    exit_guard.force(name)


def _decided_at_the_end() -> None:
    """``serve``'s last ``atexit`` hook (registered first, ``main``): its stop signals ignored from here
    (``exit_decided``), unless the exit guard is enabled, whose decision ignores them once the
    embedded server's stop is done (a third signal still forces a stop that hangs: ignored before it,
    it could not). Past the hooks the interpreter puts the signals' default action back and tears the
    modules down, and a stop signal there killed by the signal (-15, -2) a ``serve`` stopped in its
    imports, whose guard was never enabled (exit55)."""
    guard = sys.modules.get("service.api.exit_guard")
    if guard is None or not guard.enabled():
        exit_decided()


def exit_decided() -> None:
    """A refusal's exit is under way (status 2: ``serve``'s checks, the command line's parse), or the
    console script's exit has run its other ``atexit`` hooks (``main``): where ``exit_cleanly`` hears
    SIGINT and SIGTERM (the console script's process, or ``run``'s), ignore them from now. Heard, a
    stop raised ``SystemExit(0)`` over the refusal, its line unprinted where the signal met the print, and a
    process that refused its settings exited 0 (review51b). The sidecar's refusals keep theirs the
    same way (``early_stop.deciding``). Elsewhere (a test's ``CliRunner``) nothing changes; off the
    main thread, where no handler can be set, neither (none runs there either)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is exit_cleanly:
            signal.signal(signum, signal.SIG_IGN)


def _flag(argv: list[str], name: str) -> str:
    """The value of ``name`` on the command line (``--name value`` or ``--name=value``), "" if absent:
    what the counters line names before the command line was parsed."""
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(f"{name}="):
            return arg.split("=", 1)[1]
    return ""


if __name__ == "__main__":
    main()
