"""No pydantic model of the service names a field in a namespace pydantic reserves at its floor.

pydantic before 2.10 reserved every ``model_`` name unless a model said otherwise (and pydantic-settings
2.3 did so for settings), warning on each such field when its class was built: at the declared floors
every ``rollout-scheduler`` command printed three UserWarnings on stderr before its own words, and the
one-line error of ``serve --redis-cluster`` without a URL came out as thirteen lines. Newer versions
reserve less, so the dev venv never showed it; here each model's own setting is read against the
floor's default.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator

import pydantic

import service

FLOOR_DEFAULT = ("model_",)  # pydantic 2.7's protected_namespaces where a model sets none


def _models(cls: type[pydantic.BaseModel] = pydantic.BaseModel) -> Iterator[type[pydantic.BaseModel]]:
    for sub in cls.__subclasses__():
        if sub.__module__.startswith("service."):
            yield sub
        yield from _models(sub)


def _reserved(name: str, model: type[pydantic.BaseModel]) -> bool:
    """Whether pydantic at its floor reserves ``name`` on ``model`` (a prefix, or a pattern since 2.10)."""
    spaces = model.model_config.get("protected_namespaces", FLOOR_DEFAULT)
    return any(name.startswith(ns) if isinstance(ns, str) else re.match(ns, name) for ns in spaces)


def test_no_field_of_a_service_model_is_in_a_protected_namespace() -> None:
    for info in pkgutil.walk_packages(service.__path__, "service."):
        importlib.import_module(info.name)
    clashes = [
        f"{model.__module__}.{model.__name__}.{name}"
        for model in set(_models())
        for name in model.model_fields
        if _reserved(name, model)
    ]
    assert not clashes, f"set protected_namespaces in these models' model_config: {clashes}"
