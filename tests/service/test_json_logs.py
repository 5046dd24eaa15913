"""``logs.configure``: every line the process logs is one JSON object, whichever logger wrote it.

Run in a child process: ``configure`` takes over the process's root logger, as ``serve`` and the
sidecar do, which would take pytest's log capture away from the tests that follow."""

from __future__ import annotations

import json
import subprocess
import sys

_CHILD = """
import asyncio, gc, logging, warnings
from service import logs

logs.configure("INFO", fields={"worker_id": "w0"})
logging.getLogger("service.x").info("ours")
logging.getLogger("predictors.history").warning("left out 3 feature names: a history holds 64")
logging.getLogger("scheduler.planner").info("planner line")
logging.getLogger("redis.cluster").warning("a library's warning")
logging.getLogger("redis.cluster").info("a library's info")
warnings.warn("a deprecation", DeprecationWarning, stacklevel=1)

async def fails():
    raise RuntimeError("nobody awaited this")

async def main():
    task = asyncio.ensure_future(fails())
    await asyncio.sleep(0.01)
    del task
    gc.collect()

asyncio.run(main())
"""


def _lines() -> list[str]:
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", _CHILD], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stderr.splitlines()


def test_every_logger_writes_one_json_object_per_line_with_the_workers_fields() -> None:
    lines = _lines()
    entries = [json.loads(line) for line in lines]  # a bare-text line raises here
    messages = [entry["message"] for entry in entries]
    assert "ours" in messages
    assert "left out 3 feature names: a history holds 64" in messages
    assert "planner line" in messages
    assert "a library's warning" in messages
    assert all(entry["worker_id"] == "w0" for entry in entries)


def test_an_unretrieved_task_error_keeps_its_traceback_inside_its_line() -> None:
    (entry,) = [json.loads(line) for line in _lines() if "never retrieved" in line]
    assert entry["level"] == "ERROR"
    assert entry["logger"] == "asyncio"
    assert "RuntimeError: nobody awaited this" in entry["exc"]


def test_a_library_logs_warnings_not_info_and_python_warnings_are_lines_too() -> None:
    entries = [json.loads(line) for line in _lines()]
    assert "a library's info" not in [entry["message"] for entry in entries]
    (warned,) = [entry for entry in entries if entry["logger"] == "py.warnings"]
    assert "DeprecationWarning: a deprecation" in warned["message"]


_CRASH = """
import threading
from service import logs

logs.configure("INFO")
thread = threading.Thread(target=lambda: 1 / 0, name="health")
thread.start()
thread.join()
raise RuntimeError("a bug at the top")
"""


def test_a_crash_is_one_critical_line_with_its_traceback_in_the_process_and_in_a_thread() -> None:
    done = subprocess.run([sys.executable, "-c", _CRASH], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    entries = [json.loads(line) for line in done.stderr.splitlines()]
    assert [entry["message"] for entry in entries] == [
        "uncaught ZeroDivisionError in thread health: division by zero",
        "uncaught RuntimeError: a bug at the top",
    ]
    assert all(entry["level"] == "CRITICAL" for entry in entries)
    assert "Traceback" in entries[0]["exc"]
    assert entries[1]["exc"].endswith("RuntimeError: a bug at the top")


_THEIRS = """
import threading
from service import logs

def theirs(args):
    print("their hook", flush=True)

threading.excepthook = theirs
logs.configure("INFO")
thread = threading.Thread(target=lambda: 1 / 0)
thread.start()
thread.join()
"""


def test_a_thread_hook_someone_else_installed_stays_theirs() -> None:
    """A test runner's (pytest reports a thread's crash through its own hook) or a debugger's: a
    command run in-process by a test took it over, and later tests' thread crashes went unreported."""
    done = subprocess.run([sys.executable, "-c", _THEIRS], capture_output=True, text=True, timeout=60)
    assert done.stdout == "their hook\n"
    assert done.stderr == ""
