"""``POST /runs/{id}/resume``: answer the question a paused run waits for
(``orchestration/celery_adapter/pause.py``, ``orchestration/store/waits.py``).

::

    POST /runs/{id}/resume   {"answer", "path"?, "key"?}
                             -> 200 {"accepted": true, "status", "wait"}; 409 refused (a wrong answer,
                                answered already, no such question: the run goes on waiting);
                                404 no such run

GraphQL's ``resumeRun(id, answer, path, key): JSON`` goes the same way. It needs the
``start`` scope (an answer steers a run as a start does) and a run the caller may
reach (its principal's, or any with ``admin``; else 404, as for a run that does
not exist), and is sent to the workers as ``agentloop.resume``, which checks the
answer against the question's schema.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentloop.orchestration.web.auth import START, Principal
from agentloop.orchestration.web.refusals import (
    conflict,
    invalid_input,
    not_found,
    unavailable,
    unsupported_media_type,
)
from agentloop.orchestration.web.request_limits import check_identifier, parse_json_body
from agentloop.orchestration.web.service import RunService
from agentloop.orchestration.web.state import caller, web_state
from agentloop.orchestration.wire import RESUME

__all__ = ["resume_routes", "resume_through_workers"]

#: Seconds to wait for a worker to answer the resume.
RESUME_TIMEOUT = 30.0


async def resume_through_workers(
    service: RunService, principal: Principal, run_id: Any, answer: Any, *, path: Any = None, key: Any = None
) -> dict[str, Any]:
    """``agentloop.resume``'s answer for ``answer``; 404 when the run is not the caller's to reach
    (or the workers' store has no such run), 409 when refused, 503 when no worker answers."""
    principal.require(START)
    await service.check_reach(principal, run_id)
    celery_app = service.celery_app
    kwargs: dict[str, Any] = {"run_id": check_identifier(run_id, what="run id"), "answer": answer}
    kwargs.update({name: str(value) for name, value in (("path", path), ("key", key)) if value is not None})
    try:
        result: dict[str, Any] = await asyncio.to_thread(
            lambda: celery_app.send_task(RESUME, kwargs=kwargs).get(timeout=RESUME_TIMEOUT)
        )
    except Exception as error:
        raise unavailable(f"no worker resumed the run: {type(error).__name__}") from None
    if result.get("not_found"):
        raise not_found(str(result.get("reason")))
    if not result.get("accepted"):
        raise conflict(f"refused: {result.get('reason')}")
    return result


async def resume_run(request: Request) -> JSONResponse:
    principal = caller(request)
    principal.require(START)
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise unsupported_media_type("send the request with Content-Type: application/json")
    body = parse_json_body(await request.body())
    if not isinstance(body, dict) or "answer" not in body:
        raise invalid_input('the body must be a JSON object with an "answer"')
    result = await resume_through_workers(
        web_state(request).service,
        principal,
        request.path_params["run_id"],
        body["answer"],
        path=body.get("path"),
        key=body.get("key"),
    )
    return JSONResponse(result)


def resume_routes() -> list[Route]:
    return [Route("/runs/{run_id:str}/resume", resume_run, methods=["POST"])]
