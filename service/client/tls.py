"""One TLS context for every ``SchedulerClient`` of a process, built once for the CAs it trusts.

httpx builds an ``ssl.SSLContext`` for each client it is not handed one, loading certifi's CA bundle:
~34 ms of CPU a client, even for an ``http://`` URL that never uses it (docs/experiments.md, ci55).
A trainer makes one client and pays it once; a tool or a test that makes a client per call paid it
per call (tests/service/client makes ~100: docs/experiments.md, apici58). httpx's advice is to share
one context; a context only reads its CAs and settings once built, so clients on other threads may
share it. Keyed on ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``, the two variables httpx's default context
reads, so a process that sets them later gets a context of the CAs they now name, as before."""

from __future__ import annotations

import functools
import os
import ssl

import httpx


def verified_context() -> ssl.SSLContext:
    """The context a client's default would verify with (``httpx.create_ssl_context()``), shared."""
    return _context(os.environ.get("SSL_CERT_FILE") or None, os.environ.get("SSL_CERT_DIR") or None)


@functools.lru_cache(maxsize=4)
def _context(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    """Built once per pair of CA variables (the cache's key; httpx reads the same two itself)."""
    del cafile, capath
    return httpx.create_ssl_context()
