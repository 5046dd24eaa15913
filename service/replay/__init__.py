"""Offline replay: what each policy would have made of a recorded (or synthetic) rollout history.

``harness.py`` replays a trace step by step (``replay``, ``ReplayConfig``); ``batches.py`` prepares a
step's predicted and true batches, ``steps.py`` reads ``--steps`` and checks the pool can hold them,
``pool.py`` plays the runs on worker processes, ``workers.py`` says where a step's time went worker by
worker, and ``report.py`` presents the result (table, Gantt chart, HTML page). The command is
service/commands/replay.py; docs/replay.md says how to read what it prints.
"""
