"""The ``rollout-scheduler`` console script's entry point (``main``): light on purpose.

The command line itself (Typer, every command group) is ``service.cli_app``, imported only once
``main`` has done what must come first. A ``sidecar`` arms its early stop handlers before that
import (``service/sidecar/early_stop.py``): the root CLI's imports and the command's own took
0.6-0.8 s on the 2-core dev host, and a SIGTERM then killed the process by the signal (status -15,
143 to Kubernetes: a crash), where one a moment later stopped it cleanly (exit 0, counters line).
What is left unguarded is the interpreter's own start and this module's import: 20-40 ms on that
host at load 7, 200-300 ms at load 15-18, nearly all of it the interpreter and ``site``, which no
entry point runs before (docs/sidecar.md).
"""

from __future__ import annotations

import sys

# the root context's ``obj`` where ``main`` runs a command: the process ends with it
OWNS_PROCESS = "owns-process"


def main() -> None:
    """Console-script entry point: run the command line (``service.cli_app.run``); a ``sidecar``
    hears SIGTERM and SIGINT from its first line (``early_stop``), as a stop asked before its run."""
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
