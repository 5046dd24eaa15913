"""Who may call the service: bearer tokens, their two scopes, and worker tokens bound to workers.

``scopes.py`` resolves a request's token into a caller and guards each route by scope (``trainer_only``,
``any_client``, ``AuthFirstRoute``); ``tokens.py`` is the rule every token meets (printable ASCII),
which the client and the commands check too; ``worker_tokens.py`` reads ``ROLLOUT_WORKER_TOKENS``'s
``worker_id=token`` entries. This file imports nothing: the trainer-side client imports
``service.auth.tokens``, which must load nothing but itself (FastAPI comes with ``scopes.py`` only).
"""
