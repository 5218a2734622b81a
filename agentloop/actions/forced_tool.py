"""``ForcedToolAction``: a step that is exactly one forced model tool call.

The flow is fixed: load the tool schema -> build the instruction -> force the
call -> extract the call -> parse its arguments -> re-validate in code. Every
failure on the way returns :meth:`ForcedToolAction.fallback` (``None`` unless a
subclass declares otherwise); a model fault never raises out of :meth:`run`
unless the action asks for it.

No fallback is quiet (:mod:`agentloop.actions.degradation`): a step that returns its
fallback reports why, and the run ends ``degraded`` with an event naming the
step and the reason.

A failed model call (an error after the processor's retries, a reply without
the forced call, arguments that are not a JSON object) or a tool schema that
cannot be loaded follows :attr:`ForcedToolAction.on_model_failure`:
``"degrade"`` (the default) returns :meth:`ForcedToolAction.fallback_when_unavailable`
and reports the failure; ``"fail"`` raises :class:`~actions.ModelUnavailableError`. A reply
without the forced call and arguments that are not a JSON object are the model answering
wrongly, not being away: they are reported as invalid output (``kind`` ``"invalid_output"``,
:mod:`agentloop.actions.degradation`), and ``"fail"`` raises
:class:`~actions.InvalidModelOutputError` for them.

An answer :meth:`ForcedToolAction.check_output` rejects *with a retry* is
sent back to the model (its call, then a tool result saying what was wrong)
for at most :attr:`ForcedToolAction.output_retries` further tries, each one a
model call metered like any other; so are a reply without the forced call (its
text, then a turn asking for the call) and arguments that are not a JSON object,
which follow :attr:`~ForcedToolAction.on_model_failure` once the tries are spent. A typed action
(:class:`~actions.TypedToolAction`) asks for a retry when its output model
refuses the arguments; a plain action's :meth:`~ForcedToolAction.normalize`
only accepts or rejects. An answer still rejected once the tries are spent
follows :attr:`~ForcedToolAction.on_invalid_output`: ``"degrade"`` (the
default) returns :meth:`~ForcedToolAction.fallback` and reports the rejection
(the run ends ``degraded``); ``"fail"`` raises
:class:`~actions.InvalidModelOutputError`.

The tool schema is data, not code: it lives in the tool store
(``context.tool_store``, whose ``get_payload(tool_id)`` returns the payload as
a JSON string or object, or ``None``), under the id found in
``context.<tool_id_key>``, else under :attr:`ForcedToolAction.tool_id`.

A cached forced tool call (:attr:`~actions.BaseAgentAction.cache_ttl`, see
:mod:`agentloop.actions.caching`) is keyed by its arguments, a hash of the tool payload it
loads (a changed schema is a new key) and the model inputs of its context
(``history_messages``, ``documents``, ``files``); a fallback is never cached.
"""

from __future__ import annotations

import json
import logging
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from agentloop.actions.awaiting import maybe_await
from agentloop.actions.base import BaseAgentAction
from agentloop.actions.caching import schema_version, step_cache_key
from agentloop.actions.context_values import context_value
from agentloop.actions.degradation import (
    INVALID_OUTPUT,
    UNAVAILABLE,
    ModelFailure,
    ModelFailurePolicy,
    report_model_failure,
)
from agentloop.actions.errors import InvalidModelOutputError, ModelUnavailableError, TokenBudgetExceededError
from agentloop.actions.model import AiResponse, FunctionCall, ModelRequest

logger = logging.getLogger(__name__)

#: What a rejected answer does once its tries are spent: ``"degrade"`` (the fallback, reported:
#: the run ends ``degraded``) or ``"fail"`` (:class:`~actions.InvalidModelOutputError`).
InvalidOutputPolicy = Literal["degrade", "fail"]
INVALID_OUTPUT_POLICIES: tuple[InvalidOutputPolicy, ...] = ("degrade", "fail")


@dataclass(frozen=True, kw_only=True, slots=True)
class OutputRejection:
    """What :meth:`ForcedToolAction.check_output` returns for an answer it does not take:
    why (``reason``, shown to the model when it may ``retry``)."""

    reason: str
    retry: bool = False


class ForcedToolAction(BaseAgentAction):
    """Subclasses set ``tool_name`` and ``tool_id_key`` (or ``tool_id``) and implement
    :meth:`build_instruction` and :meth:`normalize`."""

    tool_name: str = ""
    tool_id_key: str = ""
    #: The tool's id in the tool store when ``context.<tool_id_key>`` names none.
    tool_id: ClassVar[str] = ""
    #: What a failed model call does: ``"degrade"`` the run (return
    #: :meth:`fallback_when_unavailable`, report the failure) or ``"fail"`` it (raise
    #: :class:`~actions.ModelUnavailableError`).
    on_model_failure: ClassVar[ModelFailurePolicy | str] = ModelFailurePolicy.DEGRADE
    #: How many more times an answer rejected with a retry is sent back to the model.
    output_retries: ClassVar[int] = 1
    #: What an answer still rejected after its tries does (see :data:`InvalidOutputPolicy`).
    on_invalid_output: ClassVar[InvalidOutputPolicy] = "degrade"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.on_invalid_output not in INVALID_OUTPUT_POLICIES:
            raise TypeError(
                f"{cls.__qualname__}.on_invalid_output must be 'degrade' or 'fail', not "
                f"{cls.on_invalid_output!r} (a fallback is never quiet: 'degrade' returns it and "
                "the run ends degraded)"
            )

    async def cache_key(self, *, arguments: dict[str, Any], context: Any) -> str | None:
        """A hash of the action's name, ``arguments``, :attr:`cache_version`, the tool payload it
        loads and the context's model inputs (``history_messages``, ``documents``, ``files``)."""
        payload = await self.load_tool_payload(context=context)
        inputs = {name: context_value(context, name) for name in ("history_messages", "documents", "files")}
        return step_cache_key(self.name, arguments, self.cache_version, schema_version(payload), inputs)

    def stored_tool_id(self, *, context: Any) -> str | None:
        """The id the schema is stored under: ``context.<tool_id_key>``, else :attr:`tool_id`."""
        tool_id = context_value(context, self.tool_id_key) if self.tool_id_key else None
        return tool_id if tool_id is not None else (self.tool_id or None)

    async def load_tool_payload(self, *, context: Any) -> dict[str, Any] | None:
        """The tool schema from the tool store; ``None`` when missing or unparsable. Raises what
        the store raises (a store that cannot answer is not a missing tool: :meth:`run` reports it
        as a failed model call)."""
        store = context_value(context, "tool_store")
        tool_id = self.stored_tool_id(context=context)
        if store is None or tool_id is None:
            return None
        payload = await maybe_await(store.get_payload(tool_id))
        if isinstance(payload, str | bytes):
            try:
                payload = json.loads(payload)
            except ValueError:
                return None
        if not isinstance(payload, Mapping) or not isinstance(payload.get("name"), str):
            return None
        return dict(payload)

    async def send_forced_tool_request(
        self,
        *,
        context: Any,
        instruction: str,
        tool_payload: Mapping[str, Any],
        history_messages: Sequence[Mapping[str, Any]] | None = None,
    ) -> AiResponse:
        """One model turn that must call ``tool_payload``'s tool (after ``history_messages``,
        by default the context's)."""
        processor = context_value(context, "processor")
        if processor is None:
            return AiResponse.failure("context has no processor")
        if history_messages is None:
            history_messages = context_value(context, "history_messages", [])
        request = ModelRequest(
            instruction=instruction,
            tools=(dict(tool_payload),),
            tool_choices=({"name": tool_payload["name"]},),
            history_messages=tuple(history_messages),
            documents=tuple(context_value(context, "documents", [])),
            files=tuple(context_value(context, "files", [])),
        )
        try:  # metered: counts against the run's budget (actions/usage.py)
            return await request.forward(processor)
        except TokenBudgetExceededError:  # a spent budget stops the step: it is not a model fault
            raise
        except Exception as error:  # processors should not raise; if one does, it is a model fault
            logger.warning("processor raised during forced tool call", exc_info=True)
            return AiResponse.failure(f"{type(error).__name__}: {error}")

    def extract_function_call(self, *, response: AiResponse, tool_name: str) -> FunctionCall | None:
        """The first call to ``tool_name``; ``None`` when the model called none."""
        return next((call for call in response.function_calls if call.name == tool_name), None)

    def parse_function_call_arguments(self, *, function_call: FunctionCall) -> dict[str, Any] | None:
        """The call's arguments as a JSON object; ``None`` when they are not one."""
        try:
            parsed = json.loads(function_call.arguments)
        except (TypeError, ValueError):
            return None
        return parsed if isinstance(parsed, dict) else None

    @abstractmethod
    def build_instruction(self, *, arguments: dict[str, Any], context: Any) -> str:
        """The instruction for the model; embed user text with ``embed_user_text``."""

    @abstractmethod
    def normalize(self, *, parsed: dict[str, Any], arguments: dict[str, Any], context: Any) -> Any:
        """Re-validate the model's output in code; return the typed value or ``None``."""

    async def check_output(self, *, parsed: dict[str, Any], arguments: dict[str, Any], context: Any) -> Any:
        """The step's value from the model's arguments, or an :class:`OutputRejection`.

        Here: :meth:`normalize`; ``None`` (or an exception) rejects the answer without a retry.
        """
        try:
            value = await maybe_await(self.normalize(parsed=parsed, arguments=arguments, context=context))
        except Exception as error:  # a validator that trips on odd output is a rejection
            return OutputRejection(reason=f"normalize raised {type(error).__name__}: {error}")
        return OutputRejection(reason="model output rejected by normalize") if value is None else value

    def fallback(self, *, arguments: dict[str, Any], context: Any, reason: str) -> Any:
        """What the step returns when anything fails. ``None`` by default."""
        return None

    def fallback_when_unavailable(
        self, *, arguments: dict[str, Any], context: Any, failure: ModelFailure
    ) -> Any:
        """What the step returns when its model call failed and the run degrades: :meth:`fallback`
        by default; override to say that the model was unavailable."""
        return self.fallback(arguments=arguments, context=context, reason=failure.reason)

    async def model_failed(
        self, *, arguments: dict[str, Any], context: Any, reason: str, kind: str = UNAVAILABLE
    ) -> Any:
        """Apply :attr:`on_model_failure` to a failed model call (``kind``: :data:`INVALID_OUTPUT`
        for a reply without the forced call or with arguments that are not a JSON object, raised as
        :class:`~actions.InvalidModelOutputError` under ``"fail"``)."""
        if ModelFailurePolicy(self.on_model_failure) is ModelFailurePolicy.FAIL:
            failed = ModelFailure(action=self.name, reason=reason, kind=kind)
            raise InvalidModelOutputError(failed) if kind == INVALID_OUTPUT else ModelUnavailableError(failed)
        failure = await report_model_failure(action=self.name, reason=reason, kind=kind)
        return await maybe_await(
            self.fallback_when_unavailable(arguments=arguments, context=context, failure=failure)
        )

    async def output_rejected(self, *, arguments: dict[str, Any], context: Any, reason: str) -> Any:
        """Apply :attr:`on_invalid_output` to an answer still rejected after its tries."""
        if self.on_invalid_output == "fail":
            raise InvalidModelOutputError(ModelFailure(action=self.name, reason=reason, kind=INVALID_OUTPUT))
        await report_model_failure(action=self.name, reason=reason, kind=INVALID_OUTPUT)
        return await maybe_await(self.fallback(arguments=arguments, context=context, reason=reason))

    def retry_messages(
        self, *, response: AiResponse, call: FunctionCall, reason: str, attempt: int
    ) -> list[dict[str, Any]]:
        """The turns that send a rejected answer back: the model's call, then a tool result saying why."""
        call_id = call.id or f"call_{self.name}_{attempt}"
        return [
            {
                "role": "assistant",
                "content": response.text,
                "tool_calls": [{"id": call_id, "name": call.name, "arguments": call.arguments}],
            },
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": json.dumps(
                    {"ok": False, "error": f"{reason}. Call {call.name} again with corrected arguments."}
                ),
            },
        ]

    def call_again_messages(
        self, *, response: AiResponse, tool_name: str, reason: str
    ) -> list[dict[str, Any]]:
        """The turns that send a reply without the forced call back: the model's text, then a user
        turn saying that the tool must be called."""
        return [
            {"role": "assistant", "content": response.text},
            {"role": "user", "content": f"{reason}. Call {tool_name} with its arguments."},
        ]

    async def run(self, *, arguments: dict[str, Any], context: Any) -> Any:
        async def unavailable(reason: str, kind: str = UNAVAILABLE) -> Any:
            return await self.model_failed(arguments=arguments, context=context, reason=reason, kind=kind)

        try:
            tool_payload = await self.load_tool_payload(context=context)
        except Exception as error:  # the store is down: the step cannot ask the model
            logger.warning("tool store failed for action %s", self.name, exc_info=True)
            return await unavailable(f"tool store failed: {type(error).__name__}: {error}")
        if tool_payload is None:
            logger.warning(
                "action %s has no usable tool schema under id %r in context.tool_store",
                self.name,
                self.stored_tool_id(context=context),
            )
            return await unavailable("tool schema missing or unparsable")
        tool_name = self.tool_name or tool_payload["name"]
        instruction = await maybe_await(self.build_instruction(arguments=arguments, context=context))
        history = list(context_value(context, "history_messages", []))
        tries = 1 + max(0, int(self.output_retries))
        for attempt in range(1, tries + 1):
            response = await self.send_forced_tool_request(
                context=context, instruction=instruction, tool_payload=tool_payload, history_messages=history
            )
            if response.has_error:
                return await unavailable(f"model error: {response.error}")
            function_call = self.extract_function_call(response=response, tool_name=tool_name)
            parsed = (
                None
                if function_call is None
                else self.parse_function_call_arguments(function_call=function_call)
            )
            if function_call is None or parsed is None:  # a wrong answer: asked again while tries are left
                reason = (
                    f"model did not call {tool_name!r}"
                    if function_call is None
                    else "tool arguments are not a JSON object"
                )
                if attempt == tries:
                    spent = reason if attempt == 1 else f"{reason} (after {attempt} tries)"
                    return await unavailable(spent, INVALID_OUTPUT)
                history += (
                    self.retry_messages(response=response, call=function_call, reason=reason, attempt=attempt)
                    if function_call is not None
                    else self.call_again_messages(response=response, tool_name=tool_name, reason=reason)
                )
                continue
            value = await self.check_output(parsed=parsed, arguments=arguments, context=context)
            if not isinstance(value, OutputRejection):
                return value
            if not value.retry or attempt == tries:
                reason = value.reason if attempt == 1 else f"{value.reason} (after {attempt} tries)"
                return await self.output_rejected(arguments=arguments, context=context, reason=reason)
            history += self.retry_messages(
                response=response, call=function_call, reason=value.reason, attempt=attempt
            )
        raise AssertionError("unreachable: the last try returns")  # pragma: no cover
