"""``/ui``: the run viewer, static HTML and JavaScript from ``static/`` (no build step, nothing
loaded from the internet).

The files hold no data: the page asks for a token (or takes it from the
address's ``#token=`` fragment, which browsers never send to a server), keeps it
in the tab's ``sessionStorage`` and calls the same routes as any client with
``Authorization: Bearer``. A content security policy allows this origin only.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import Route

__all__ = ["STATIC", "ui_routes"]

STATIC = Path(__file__).resolve().parent / "static"
#: The files served, by name: nothing else under ``static/`` is reachable.
_FILES = {
    "index.html": "text/html; charset=utf-8",
    "viewer.js": "text/javascript; charset=utf-8",
    "tree.js": "text/javascript; charset=utf-8",
    "viewer.css": "text/css; charset=utf-8",
}
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


async def ui_file(request: Request) -> Response:
    name = request.path_params.get("name", "index.html")
    if name not in _FILES:
        return Response("not found", status_code=404, media_type="text/plain")
    return FileResponse(STATIC / name, media_type=_FILES[name], headers=_HEADERS)


async def to_ui(request: Request) -> Response:
    return RedirectResponse("/ui/", status_code=307)


def ui_routes() -> list[Route]:
    return [
        Route("/", to_ui, methods=["GET"]),
        Route("/ui", to_ui, methods=["GET"]),
        Route("/ui/", ui_file, methods=["GET"]),
        Route("/ui/{name:str}", ui_file, methods=["GET"]),
    ]
