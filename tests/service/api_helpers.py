"""What the service's tests build apps and requests from: request bodies, tokens, a live server.

A plain module, imported by name; the fixtures that use it are tests/service/conftest.py's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

from scheduler.devices import device_profile, model_preset
from scheduler.types import Trajectory, Worker
from service.api.learning_schemas import ActualReport
from service.app import create_app
from service.settings import Settings
from service.speeds.model import modelled_seconds

TRAINER = "trainer-secret"
WORKER = "worker-secret"

AppFactory = Callable[..., TestClient]


def played_report(t: Trajectory, wall_time_s: float, concurrency: float, **extra: Any) -> dict[str, Any]:
    """One /actuals report of worker w0 at step 0 for ``t`` played by the planner's simulator: its
    predicted tokens as the output, its wall time and the mean concurrency it saw (the speed tests')."""
    return {
        "step": 0,
        "prompt_id": t.prompt_id,
        "sample_idx": 0,
        "worker_id": "w0",
        "prompt_tokens": t.prompt_tokens,
        "output_tokens": int(t.predicted_tokens),
        "max_new_tokens": t.max_new_tokens,
        "finish_reason": "stop",
        "wall_time_s": wall_time_s,
        "concurrency": concurrency,
        **extra,
    }


def batch_body(prompts: int = 8, n: int = 4, workers: int = 2, **extra: Any) -> dict[str, Any]:
    """A valid /schedule body: ``prompts`` x ``n`` trajectories on ``workers`` H100/910B workers."""
    devices = ("H100", "Ascend910B")
    return {
        "batch": {
            "items": [
                {
                    "prompt_id": f"p{i}",
                    "prompt_tokens": 100 + 10 * i,
                    "n": n,
                    "max_new_tokens": 2048,
                    "prompt": f"question {i}",
                }
                for i in range(prompts)
            ]
        },
        "inventory": {
            "workers": [
                {"worker_id": f"w{j}", "device": devices[j % 2], "max_num_seqs": 64} for j in range(workers)
            ]
        },
        "policy": "lpt",
        **extra,
    }


def bearer(token: str) -> dict[str, str]:
    """The Authorization header for ``token``."""
    return {"Authorization": f"Bearer {token}"}


class LiveServer:
    """A real uvicorn server on a loopback port in a thread (for socket-level and client tests): the
    kernel's pick, read from its socket once it listens (``tests.service.bound_port``), unless
    ``port`` is given (a restart on the same port)."""

    def __init__(self, settings: Settings, port: int | None = None) -> None:
        import threading

        import uvicorn

        self.port = port or 0  # 0 until it listens, then the port it bound
        config = uvicorn.Config(
            create_app(settings), host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        import time

        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        self.port = int(self.server.servers[0].sockets[0].getsockname()[1])
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def with_settings(base: Settings, **changes: Any) -> Settings:
    """``base`` with ``changes``, validated like any settings (``model_copy`` would skip validation)."""
    return Settings(**{**base.model_dump(), **changes})


def actual_report(
    step: int, prompt: int, sample: int, worker: str = "w0", slowdown: float = 1.0
) -> dict[str, Any]:
    """A report whose length depends on the prompt, taking ``slowdown`` x the modelled H100 time."""
    tokens = 200 + 150 * prompt + 7 * sample + 20 * step
    report = {
        "step": step,
        "prompt_id": f"p{prompt}",
        "sample_idx": sample,
        "worker_id": worker,
        "prompt_tokens": 100 + 10 * prompt,
        "output_tokens": tokens,
        "finish_reason": "stop",
        "wall_time_s": 1.0,
        "concurrency": 8,
        "max_new_tokens": 2048,
        "reward": 1.0 if prompt % 2 else 0.0,
    }
    h100 = Worker("w0", device_profile("H100"), max_num_seqs=64)
    modelled = modelled_seconds(h100, model_preset("7b"), ActualReport.model_validate(report))
    report["wall_time_s"] = slowdown * modelled
    return report


def actual_history(steps: int = 2, prompts: int = 8, n: int = 4) -> list[dict[str, Any]]:
    return [actual_report(s, p, i) for s in range(steps) for p in range(prompts) for i in range(n)]
