"""Plain HTTP for clients without GraphQL: start, read, list and cancel runs; runnables and graphs.

::

    POST /runs                      {"runnable", "input", "context"?, "run_id"?, "token_budget"?,
                                     "record"?}
                                    -> 202 the pending run (200 when run_id names this workflow's run)
    GET  /runs?status=&runnable=&limit=&offset=
    GET  /runs/{id}
    POST /runs/{id}/cancel          -> the run, cancel_requested
    GET  /runnables
    GET  /runnables/{name}/graph    -> {"name", "graph", "mermaid"}

``GET /runs/{id}/events`` (Server-Sent Events) is in ``sse.py``. Every route
needs a token (or an anonymous scope); a ``POST`` needs ``Content-Type:
application/json``, which a cross-site form cannot send.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentloop.orchestration.web.refusals import invalid_input, unsupported_media_type
from agentloop.orchestration.web.request_limits import parse_json_body
from agentloop.orchestration.web.state import caller, web_state

__all__ = ["rest_routes"]


async def _json_body(request: Request) -> Any:
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise unsupported_media_type("send the request with Content-Type: application/json")
    return parse_json_body(await request.body())


def _int_param(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value is None:
        return default
    if not value.isdigit():
        raise invalid_input(f"{name} must be a non-negative integer")
    return int(value)


async def start_run(request: Request) -> JSONResponse:
    principal = caller(request)
    body = await _json_body(request)
    if not isinstance(body, dict):
        raise invalid_input("the body must be a JSON object")
    view, created = await web_state(request).service.start(principal, body)
    return JSONResponse(
        view, status_code=202 if created else 200, headers={"Location": f"/runs/{view['id']}"}
    )


async def list_runs(request: Request) -> JSONResponse:
    principal = caller(request)
    views = await web_state(request).service.list_runs(
        principal,
        status=request.query_params.get("status"),
        runnable=request.query_params.get("runnable"),
        limit=_int_param(request, "limit", 50),
        offset=_int_param(request, "offset", 0),
    )
    return JSONResponse({"runs": views})


async def get_run(request: Request) -> JSONResponse:
    principal = caller(request)
    return JSONResponse(await web_state(request).service.get(principal, request.path_params["run_id"]))


async def cancel_run(request: Request) -> JSONResponse:
    principal = caller(request)
    await _json_body(request)
    return JSONResponse(await web_state(request).service.cancel(principal, request.path_params["run_id"]))


async def runnables(request: Request) -> JSONResponse:
    principal = caller(request)
    return JSONResponse({"runnables": web_state(request).service.runnables(principal)})


async def graph(request: Request) -> JSONResponse:
    principal = caller(request)
    return JSONResponse(web_state(request).service.graph(principal, request.path_params["name"]))


def rest_routes() -> list[Route]:
    return [
        Route("/runs", start_run, methods=["POST"]),
        Route("/runs", list_runs, methods=["GET"]),
        Route("/runs/{run_id:str}", get_run, methods=["GET"]),
        Route("/runs/{run_id:str}/cancel", cancel_run, methods=["POST"]),
        Route("/runnables", runnables, methods=["GET"]),
        Route("/runnables/{name:str}/graph", graph, methods=["GET"]),
    ]
