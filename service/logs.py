"""Structured JSON logs: one object per line, carrying the schedule id of the request being served.

Log shippers (Loki, CloudWatch, Elasticsearch) index JSON fields without parsing rules, and an
operator chasing one bad step greps for its ``schedule_id``. The id travels in a context variable, so
code deep in the pipeline logs it without passing it around.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import Context, ContextVar
from types import TracebackType
from typing import Any

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")  # the service's and the sidecar's --log-level

schedule_id_var: ContextVar[str | None] = ContextVar("schedule_id", default=None)

_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",
}


class JsonFormatter(logging.Formatter):
    """Render a record as one JSON object with time, level, logger, message, schedule_id and extras.

    ``fields`` are stamped on every line: a sidecar's ``worker_id``, without which a log store that
    gathers every worker's lines cannot say whose engine froze or whose Redis calls failed."""

    def __init__(self, fields: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.fields = dict(fields or {})

    def format(self, record: logging.LogRecord) -> str:
        """Format ``record``; ``extra={...}`` fields become top-level keys."""
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        schedule_id = getattr(record, "schedule_id", None) or schedule_id_var.get()
        if schedule_id:
            entry["schedule_id"] = schedule_id
        entry.update({key: value for key, value in self.fields.items() if key not in entry})
        for key, value in vars(record).items():
            if key not in _RESERVED and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


# The loggers at the chosen level: ours (the planner's and predictor's packages log too: a history
# that leaves feature names out) and uvicorn's. Any other reaches the root at WARNING.
OWN_LOGGERS = ("service", "scheduler", "predictors", "uvicorn", "uvicorn.error")


def configure(level: str = "INFO", fields: Mapping[str, str] | None = None) -> None:
    """Send every log line of the process to stderr as JSON; called by ``serve`` and the sidecar
    (whose ``fields`` name its worker), not on import.

    The root logger gets the handler too, and Python's warnings go through it: a line from a logger
    with no handler of its own (``predictors.history``, asyncio's ``Task exception was never
    retrieved``, redis-py) was printed by ``logging.lastResort`` as bare text, its traceback over
    several lines, each of which a log shipper reads as a record of its own; so was a crash, by
    Python's except hooks, which log it here instead."""
    install_record_factory()
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter(fields))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(logging.WARNING, logging.getLevelName(level)))  # a library's INFO is not ours
    for name in OWN_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level)
        logger.propagate = False
    logging.getLogger("uvicorn.access").disabled = True  # the app logs each request itself, as JSON
    logging.getLogger("uvicorn.error").addFilter(_force_quit_line)
    logging.captureWarnings(True)  # ``warnings.warn`` printed two lines of text (message, source)
    # over the interpreter's own hooks only (and typer's, which hands a plain traceback to the
    # interpreter's): one installed by someone else, a test runner's or a debugger's, stays theirs
    if sys.excepthook is sys.__excepthook__ or getattr(sys.excepthook, "__module__", "") == "typer.main":
        sys.excepthook = _log_uncaught
    if threading.excepthook is threading.__excepthook__:
        threading.excepthook = _log_uncaught_in_thread


FORCE_QUIT_LOG = "a second Ctrl-C cut the wait for requests in flight: the app's stop runs as the loop ends"


def _force_quit_line(record: logging.LogRecord) -> bool:
    """uvicorn's line for its lifespan task cancelled, made ``FORCE_QUIT_LOG``, one WARNING line. A
    second Ctrl-C while uvicorn waits for requests in flight is its force-quit: it skips the
    lifespan's shutdown, and the loop's end cancels the lifespan task; Starlette reports that as the
    lifespan's failed shutdown, its traceback as the message, which uvicorn logged as an ERROR: an
    error report for what the user asked for (exit52 left it; review52a). A traceback ending in any
    other exception keeps its ERROR."""
    message = record.getMessage()
    last = message.rstrip().rpartition("\n")[2].partition(":")[0]
    if message.startswith("Traceback") and last.endswith(".CancelledError"):
        record.msg, record.args = FORCE_QUIT_LOG, ()
        record.levelno, record.levelname = logging.WARNING, "WARNING"
    return True


def _log_uncaught(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
    """A crash's traceback as one CRITICAL line, not Python's text over many lines: the last thing a
    process says before its restart is the line an operator looks for first (Ctrl-C stays quiet)."""
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, error, trace)
        return
    logging.getLogger("service").critical(
        "uncaught %s: %s", kind.__name__, error, exc_info=(kind, error, trace)
    )


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    """The same for a thread's crash, naming the thread (the process may go on without it)."""
    if args.exc_value is None or issubclass(args.exc_type, SystemExit):
        return
    thread = args.thread.name if args.thread is not None else "?"
    logging.getLogger("service").critical(
        "uncaught %s in thread %s: %s",
        args.exc_type.__name__,
        thread,
        args.exc_value,
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )


def install_record_factory() -> None:
    """Stamp every log record with the current schedule id when it is created (idempotent).

    Done at record creation, not formatting, so the id survives handlers that format later or on
    another thread (queue handlers, pytest's capture). Called by the app factory and ``configure``.
    """
    current = logging.getLogRecordFactory()
    if getattr(current, "_stamps_schedule_id", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = current(*args, **kwargs)
        schedule_id = schedule_id_var.get()
        if schedule_id is not None:
            record.schedule_id = schedule_id
        return record

    factory._stamps_schedule_id = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


@contextmanager
def schedule_context(schedule_id: str | None) -> Iterator[None]:
    """Tag every log line emitted inside the block with ``schedule_id`` (None: leave as it is)."""
    if schedule_id is None:
        yield
        return
    token = schedule_id_var.set(schedule_id)
    try:
        yield
    finally:
        schedule_id_var.reset(token)


def schedule_only_context() -> Context:
    """A fresh context carrying only this one's schedule id, for a thread that outlives its request
    (a retrain started by a step). A copy of the request's whole context carried its deadlines too:
    the stop's clock and ``NEVER`` (``service/api/stopping.py``), the caller's hard deadline
    (``scheduler.giveup``), the predict stage's cutoff (``predictors.cutoff``); work that ever checked
    one would give up at the deadline of a request it is no part of. (A retrain gives up at the
    replica's stop by its own check, ``Retrainer.halt``.)"""
    context = Context()
    context.run(schedule_id_var.set, schedule_id_var.get())
    return context


def request_schedule_id(scope: Mapping[str, Any]) -> str | None:
    """The schedule a request is about: the one ``POST /schedule`` chose (``request.state``), or the
    ``{schedule_id}`` of its path. For lines written outside the route (access log, error answers),
    where the route's own ``schedule_context`` has already ended."""
    chosen = scope.get("state", {}).get("schedule_id")
    if chosen is not None:
        return str(chosen)
    from_path = scope.get("path_params", {}).get("schedule_id")
    return None if from_path is None else str(from_path)


_LOGGED = "_rollout_logged"  # the attribute ``mark_logged`` sets on an exception


def mark_logged(error: BaseException) -> None:
    """Note that the failure ``error`` stands for has had its log line, so the request's problem
    handler, which logs every 5xx it answers, does not log the same failure a second time (a failed
    ``POST /models/retrain`` was a ``retrain failed`` line and a ``request failed`` one, one reason
    twice)."""
    setattr(error, _LOGGED, True)


def already_logged(error: BaseException) -> bool:
    """Whether ``mark_logged`` was called on ``error``."""
    return bool(getattr(error, _LOGGED, False))
