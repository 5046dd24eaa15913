"""The pure planning core of rollout-scheduler: domain types, cost model, bounds, policies, simulator.

Nothing in this package performs I/O, so the service, the replay CLI and the tests all drive the same
code with plain dataclasses in and plain dataclasses out.
"""
