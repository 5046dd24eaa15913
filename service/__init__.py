"""The I/O side of rollout-scheduler: HTTP service, Redis delivery protocol, sidecar, engine stand-in, CLI."""
