"""One TLS context for every ``SchedulerClient`` of a process, built once for the CAs it trusts.

httpx builds an ``ssl.SSLContext`` for each client it is not handed one, loading certifi's CA bundle:
~34 ms of CPU a client, even for an ``http://`` URL that never uses it (docs/experiments.md, ci55).
A trainer makes one client and pays it once; a tool or a test that makes a client per call paid it
per call (tests/service/client makes ~100: docs/experiments.md, apici58). httpx's advice is to share
one context; a context only reads its CAs and settings once built, so clients on other threads may
share it. Keyed on ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``, the two variables httpx's default context
reads, so a process that sets them later gets a context of the CAs they now name, as before; and on
``SSLKEYLOGFILE``, which ``ssl.create_default_context`` reads as it builds the context: a process that
set it after its first client (a user capturing one run's TLS for Wireshark) got no key log, as it
did while each client built its own context (edges60)."""

from __future__ import annotations

import functools
import os
import ssl

import httpx

ENVIRONMENT = ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE")  # what building a context reads


def verified_context() -> ssl.SSLContext:
    """The context a client's default would verify with (``httpx.create_ssl_context()``), shared."""
    return _context(*(os.environ.get(name) or None for name in ENVIRONMENT))


@functools.lru_cache(maxsize=4)
def _context(cafile: str | None, capath: str | None, keylog: str | None) -> ssl.SSLContext:
    """Built once per value of the variables it reads (the cache's key; httpx and ``ssl`` read them)."""
    del cafile, capath, keylog
    return httpx.create_ssl_context()
