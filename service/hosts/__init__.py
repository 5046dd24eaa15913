"""Which names in ``Host`` a server that trusts loopback answers to: the guard against DNS rebinding.

``names.py`` is the rule (loopback names plus ``ROLLOUT_ALLOWED_HOSTS``), without a web framework, for
the push sidecar's standard-library health port and the settings' check; ``allow_list.py`` is the
ASGI middleware that applies it to the service without tokens and to the sidecar's pull API. This
file imports nothing, so ``names.py`` stays free of Starlette.
"""
