"""docs/api.md and the app agree on the routes: its endpoint table lists every route of ours and no
other, every ``METHOD /path`` its prose names is one, and FastAPI's own pages are named too."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.routing import APIRoute
from starlette.routing import Route

from service.app import API_ROUTERS, create_app
from service.settings import Settings

API_DOC = Path(__file__).resolve().parents[3] / "docs" / "api.md"
_ROW = re.compile(r"^\| ([A-Z][A-Z, ]*) \| `(/[^`]*)` \|", re.MULTILINE)
_NAMED = re.compile(r"\b(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) (/[\w{}/.-]*)")


def _template(path: str) -> str:
    """``path`` with its parameters unnamed: the docs write ``{id}`` where the code has ``{schedule_id}``."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def _routes() -> set[tuple[str, str]]:
    """(method, path template) of every endpoint of ours, HEAD on the probes included."""
    return {
        (method, _template(route.path))
        for router in API_ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in route.methods or ()
    }


def _table(text: str) -> set[tuple[str, str]]:
    """(method, path template) of every row of an endpoint table such as ``| GET, HEAD | `/readyz` |``."""
    return {
        (method.strip(), _template(path))
        for methods, path in _ROW.findall(text)
        for method in methods.split(",")
    }


def test_the_endpoint_table_lists_every_route_and_no_other() -> None:
    table = _table(API_DOC.read_text())
    routes = _routes()
    assert (sorted(routes - table), sorted(table - routes)) == ([], [])


def test_every_method_and_path_the_api_doc_names_is_a_route() -> None:
    routes = _routes()
    named = {(method, _template(path.rstrip("."))) for method, path in _NAMED.findall(API_DOC.read_text())}
    assert named
    assert sorted(named - routes) == []


def test_every_page_fastapi_serves_beside_ours_is_named_in_the_api_doc() -> None:
    """The schema and its browsable views answer without a token; an operator should know they exist."""
    app = create_app(Settings(redis_url="redis://127.0.0.1:9/0"))  # the lifespan (Redis) never runs
    text = API_DOC.read_text()
    own = [route.path for route in app.routes if isinstance(route, Route) and not isinstance(route, APIRoute)]
    assert own != []
    assert [path for path in own if f"`{path}`" not in text] == []
