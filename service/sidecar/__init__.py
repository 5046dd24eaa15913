"""The worker sidecar: runs beside one inference engine and feeds it this worker's planned items.

``session`` is the worker's side of the delivery protocol (discover, claim/steal, heartbeat,
complete, release; its settings and counters in ``session_settings``); ``holdings`` the slot and KV
admission control; ``engine_client`` the engine's OpenAI-compatible API (its answers and failures in
``engine_reply``, what its finish reasons mean in ``finish_reasons``, shared with the pull API);
``runner`` the push mode; ``pull_api`` the local pull mode (``GET /next``,
``POST /done``, their bodies in ``pull_bodies``, the worker's bookkeeping in ``pull_state``, the
probes in ``pull_probes``) for a worker process that drives its engine itself.
docs/sidecar.md explains it.
"""
