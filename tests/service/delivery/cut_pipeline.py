"""A Redis whose connection drops once a pipeline has run its first command: a node that died
mid-pipeline (on a cluster, a command of it redirected to a node down). What the announce's and the
retire's order tests (ops66's, review65's) each wrote out: which of a pipeline's commands goes first
decides what a cut leaves."""

from __future__ import annotations

import pytest
import redis
from redis.client import Pipeline

from service.delivery import Delivery


def cut_after_first(delivery: Delivery, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pipeline of ``delivery``'s client from now on runs its first command, then raises
    ``redis.ConnectionError`` (``monkeypatch.undo()`` heals it)."""
    pipeline = delivery.client.pipeline

    def cut_short(transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        pipe = pipeline(transaction, shard_hint)

        def first_only() -> list[object]:
            args, _ = pipe.command_stack[0]
            delivery.client.execute_command(*args)  # type: ignore[no-untyped-call]
            raise redis.ConnectionError("Connection lost mid-pipeline")

        pipe.execute = first_only  # type: ignore[method-assign]
        return pipe

    monkeypatch.setattr(delivery.client, "pipeline", cut_short)
