"""The model store as the serving predictor calls it: each fault in the service's terms.

``predictors.store.ModelStore`` raises what the file system raises; a request must not answer a bare
``OSError`` (a 500) for a lost or read-only volume or a full disk. So a listing or a write that fails
is a ``ModelStoreError`` (503) naming the store, the old versions a prune leaves are a warning (the
new version is stored and serving by then), and a version whose second fence fails is taken back.
Kept apart from ``service.learning.models`` (the history's sync and the model's swap), which calls
these. Lines are logged on the model service's logger (the one ``service.learning.models`` logs
on), from which an abandoned retrain's lines are dropped (``service.learning.retrain_lines``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from predictors.model import FittedModel
from predictors.store import ModelStore
from service.problems.table import ModelStoreError

_log = logging.getLogger("service.models")


def highest_fence_token(store: ModelStore) -> int:
    """The highest fencing token in the store (``ModelStore.highest_fence_token``); 503 naming
    the store where it cannot be listed."""
    try:
        return store.highest_fence_token()
    except OSError as error:
        raise ModelStoreError(f"model store {store.root} cannot be listed ({error})") from error


def stored_versions(store: ModelStore) -> list[int]:
    """The store's complete versions; ``ModelStoreError`` (503) naming the store where it cannot be
    listed (the model held keeps serving: a reload leaves it in place)."""
    try:
        return store.versions()
    except OSError as error:
        raise ModelStoreError(f"model store {store.root} cannot be listed ({error})") from error


def saved(store: ModelStore, model: FittedModel, fence_token: int | None = None) -> int:
    """Store ``model`` as a new version; ``ModelStoreError`` naming the store where it cannot be
    written (a lost or read-only volume, a full disk), not a bare ``OSError`` (a 500)."""
    try:
        return store.save(model, fence_token)
    except OSError as error:
        raise ModelStoreError(f"model store {store.root} cannot be written ({error})") from error


def kept_if_fenced(store: ModelStore, version: int, fence: Callable[[], None]) -> None:
    """``fence`` again, the version in place: where it raises, the version is removed (a stored
    version no replica serves, ``predictors.store``) and the error raised."""
    try:
        fence()
    except BaseException:
        store.discard(version)
        raise


def pruned(store: ModelStore, keep: int) -> None:
    """Trim the store to ``keep`` versions. The new version is stored and serving by now, so a
    store that cannot be listed here fails nothing: the next retrain prunes."""
    try:
        store.prune(keep)
    except OSError as error:
        _log.warning("model store %s: old versions not pruned (%s)", store.root, error)
