"""The objects an app started in a test's own process froze, handed back to the cycle collector.

The service's startup freezes every object alive once it is built (``gc.freeze``, ``service/startup.py``:
long-lived startup objects leave the collector's scans, shorter pauses per request): right for a
replica, which owns its process and starts once. An app a test starts in the test process (a
``TestClient``'s lifespan) froze that whole process: the objects of the tests before it, and its own,
which once dead in a cycle (an app, its context, its closed clients) are never collected. Measured, 86
in-process api tests in one process (test_actuals, test_cancel, test_http_methods, test_longest_ids,
test_observability, test_openapi, test_key_lifetimes): 131,690 dead objects still held at the end and a
273 MB peak RSS, against 1,329 and 245 MB with this after each test (review54); tests/conftest.py
runs it after each module, where it costs one full collection a module, not one an app.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_unfrozen() -> Iterator[None]:
    """Within: anything may freeze the process's objects; after: none is frozen. Unfreezing a live
    object changes nothing but the collector's scans; a dead one is collected at its next run."""
    try:
        yield
    finally:
        if gc.get_freeze_count():
            gc.unfreeze()
