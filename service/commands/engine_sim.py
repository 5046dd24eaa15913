"""``rollout-scheduler engine-sim``: serve a SIMULATED OpenAI-compatible engine (no GPU, no model).

It answers like vLLM/SGLang after the time the roofline cost model gives for the chosen device and
model, with continuous-batching slowdown as concurrency grows, so sidecars, demos and benchmarks run
end to end on a laptop or in CI. docs/engine-sim.md describes what it models and what it does not.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from service.engines import SERVICE_ENGINE

if TYPE_CHECKING:
    from service.engine_sim.app import SimConfig
    from service.engine_sim.lengths import LengthSource

HELP = (
    "Serve a SIMULATED inference engine (OpenAI-compatible; no GPU and no model run): each request "
    "returns the length it asks for (or the trace's, or a seeded draw) after the time the cost model "
    "gives for DEVICE, slowing down as concurrency grows. For demos, tests and benchmarks only."
)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Attach ``engine-sim`` to the root app."""
    del bench_app
    app.command("engine-sim", help=HELP)(engine_sim)


def engine_sim(
    port: Annotated[
        int,
        typer.Option(
            min=0, max=65535, help="TCP port to listen on; 0: one the kernel picks (see the banner)."
        ),
    ],
    device: Annotated[
        str, typer.Option(help="Accelerator kind to simulate: H100, H200, A100, Ascend910B (or 910B).")
    ],
    model: Annotated[str, typer.Option(help="Model preset: 1.5b, 7b, 14b, 32b.")] = "7b",
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    num_gpus: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 1,
    max_num_seqs: Annotated[int, typer.Option(help="Concurrent sequences (vLLM max_num_seqs).")] = 256,
    kv_capacity_tokens: Annotated[
        int | None, typer.Option(help="KV cache size in tokens; default: derived from device memory.")
    ] = None,
    time_scale: Annotated[
        float, typer.Option(help="Multiplier on every modelled duration (0.01 runs 100x faster).")
    ] = 1.0,
    trace: Annotated[
        Path | None, typer.Option(help="Trace file (csv/jsonl/parquet) giving output lengths by prompt.")
    ] = None,
    trace_step: Annotated[int | None, typer.Option(help="Trace step to use; default: the last.")] = None,
    median_tokens: Annotated[
        int, typer.Option(min=1, help="Median of the seeded length draw for requests nothing else sizes.")
    ] = 512,
    served_model_name: Annotated[str | None, typer.Option(help="Model id; default sim-<model>.")] = None,
    max_model_len: Annotated[int, typer.Option(help="Prompt + output token limit.")] = 32_768,
    engine: Annotated[
        str,
        typer.Option(
            help="Engine whose preemption and admission rules to play: vllm-v1 (an evicted sequence keeps "
            "its output, no watermark; the service's default) or vllm-v0 (it restarts, 1% watermark)."
        ),
    ] = SERVICE_ENGINE,
) -> None:
    """Build the simulated engine and serve it until SIGINT/SIGTERM."""
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    from scheduler.errors import InvalidInputError
    from service.engine_sim.app import build_config, create_app

    if trace_step is not None and trace is None:
        _refuse("--trace-step needs --trace (the step of which trace?)")
    try:
        config = build_config(
            device,
            model,
            num_gpus=num_gpus,
            max_num_seqs=max_num_seqs,
            kv_capacity_tokens=kv_capacity_tokens,
            time_scale=time_scale,
            lengths=_lengths(trace, trace_step, median_tokens),
            served_model_name=served_model_name,
            max_model_len=max_model_len,
            engine=engine,
        )
    except InvalidInputError as exc:
        _refuse(str(exc))
    listener = _listener(host, port)
    _announce(config, device, host, listener.getsockname()[1], time_scale)
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning", access_log=False))
    server.run(sockets=[listener])
    if not server.started:  # as ``uvicorn.run`` ends a run that never served
        raise typer.Exit(STARTUP_FAILURE)


def _lengths(trace: Path | None, trace_step: int | None, median_tokens: int) -> LengthSource:
    """Where output lengths come from: the trace's step, or a seeded draw around ``median_tokens``."""
    from service.engine_sim.lengths import LengthSource, load_trace

    return (
        load_trace(trace, trace_step, median_tokens) if trace else LengthSource(median_tokens=median_tokens)
    )


def _listener(host: str, port: int) -> socket.socket:
    """The socket the engine serves on, bound before the banner so the banner says the port it holds:
    with ``--port 0`` the kernel's pick, which no other process can take first (a port picked free
    and bound later could be). An address this host cannot listen on (a port already taken) is one
    line and exit 2 before the banner, not uvicorn's traceback after it."""
    from service.ports import why_unservable

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:  # SO_REUSEADDR, as uvicorn binds
        return socket.create_server((host, port), family=family)
    except OSError as error:
        _refuse(why_unservable(host, port, error))


def _announce(config: SimConfig, device: str, host: str, port: int, time_scale: float) -> None:
    """Say on stderr, before serving, that the engine is SIMULATED and with which capacity."""
    cost = config.cost
    typer.echo(
        f"engine-sim: SIMULATED {device} engine serving {config.served_model_name} on http://{host}:{port} "
        f"(engine={config.engine}, max_num_seqs={cost.max_num_seqs}, kv={cost.kv_capacity_tokens} tokens, "
        f"time_scale={time_scale})",
        err=True,
    )
    sys.stderr.flush()


def _refuse(reason: str) -> NoReturn:
    """Bad input: one line on stderr and exit code 2, never a traceback."""
    typer.echo(f"engine-sim: {reason}", err=True)
    raise typer.Exit(2) from None
