"""What each protocol sends and returns: a conversation kept in chat form as Chat Completions messages or
Responses API input items, and an answer of either API as a `ParsedAnswer` (text, tool calls, finish reason,
usage, reasoning text, and the server's own timings when it reports them).

`stages.generate.client` sends the requests and retries them; nothing here does I/O. Answers are untrusted: a
body of the wrong type or without choices raises `MalformedResponse` (a transient failure the client retries).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from stages.generate.api_errors import MalformedResponse, one_line
from stages.usage import Tokens

PROCESSING_HEADER = "openai-processing-ms"  # OpenAI, llama-cpp-python: the server's time for the request
# llama.cpp's server answers with `timings`: its own prompt and generation times, without any queueing.
TIMING_FIELDS: tuple[tuple[str, str], ...] = (
    ("prompt_n", "prompt_tokens"),
    ("prompt_ms", "prompt_ms"),
    ("predicted_n", "predicted_tokens"),
    ("predicted_ms", "predicted_ms"),
)
# Where chat servers put reasoning text: `reasoning_content` (DeepSeek, vLLM, llama.cpp's server), `reasoning`
# (OpenRouter, Ollama's OpenAI endpoint, newer vLLM).
CHAT_REASONING_FIELDS: tuple[str, ...] = ("reasoning_content", "reasoning")


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str


def openai_package() -> ModuleType:
    """The openai package, imported on first use: it takes about a second, which no-op reruns and task
    listings (that never call a model) should not pay."""
    import openai
    import openai.types.chat
    import openai.types.responses

    return openai


# ---------------------------------------------------------------------------
# Conversation conversion
# ---------------------------------------------------------------------------


def _chat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A trajectory message as a Chat Completions message (local bookkeeping keys dropped); an assistant turn
    without text (tool calls only) carries `""`, which every server accepts, where `null` is refused by some."""
    content = message.get("content")
    if content is None and message["role"] == "assistant":
        content = ""
    converted = {"role": message["role"], "content": content}
    if message.get("tool_calls"):
        converted["tool_calls"] = message["tool_calls"]
    if message["role"] == "tool":
        converted["tool_call_id"] = message["tool_call_id"]
    return converted


def to_chat_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [_chat_message(message) for message in messages]


def to_responses_input(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A chat-form conversation as Responses API input items (message / function_call / function_call_output)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": message.get("content") or "",
                }
            )
        elif role == "assistant" and message.get("output_items"):
            items.extend(dict(item) for item in message["output_items"])
        elif role == "assistant":
            if message.get("content") is not None:
                items.append({"role": "assistant", "content": message["content"]})
            for call in message.get("tool_calls") or ():
                function = call["function"]
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": function["name"],
                        "arguments": function["arguments"],
                    }
                )
        else:
            items.append({"role": role, "content": message.get("content") or ""})
    return items


# ---------------------------------------------------------------------------
# Response parsing
# ---------------------------------------------------------------------------


def _usage_from(raw_usage: Any, input_name: str, output_name: str) -> Tokens:
    if raw_usage is None:
        return Tokens()
    return Tokens(int(getattr(raw_usage, input_name, 0) or 0), int(getattr(raw_usage, output_name, 0) or 0))


def _finite(value: Any) -> float | None:
    """A finite, non-negative number from untrusted JSON or a header; None for anything else."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def server_timings(extra: Any, headers: Mapping[str, str] | None) -> dict[str, float] | None:
    """The server's own account of a request: llama.cpp's `timings` (prompt and generation, no queueing) and the
    `openai-processing-ms` header (OpenAI; llama-cpp-python, where it includes the wait for its one slot)."""
    found: dict[str, float] = {}
    timings = extra.get("timings") if isinstance(extra, Mapping) else None
    if isinstance(timings, Mapping):
        for source, name in TIMING_FIELDS:
            value = _finite(timings.get(source))
            if value is not None:
                found[name] = round(value, 3)
    processing = _finite((headers or {}).get(PROCESSING_HEADER))
    if processing is not None:
        found["processing_ms"] = processing
    return found or None


@dataclass(frozen=True)
class ParsedAnswer:
    text: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None
    response_id: str | None
    usage: Tokens
    output_items: tuple[dict[str, Any], ...] = ()
    extra: Mapping[str, Any] | None = None  # fields of the body outside the protocol (e.g. llama.cpp's timings)
    reasoning: str | None = None


def chat_reasoning(message: Any) -> str | None:
    """The reasoning text of a chat answer: the first of `CHAT_REASONING_FIELDS` that holds text (fields outside
    the protocol, which the openai client keeps as extras); None when there is none."""
    extra = getattr(message, "model_extra", None)
    if not isinstance(extra, Mapping):
        return None
    for name in CHAT_REASONING_FIELDS:
        value = extra.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _reasoning_item_texts(item: Any) -> list[str]:
    """The summary texts of one Responses API reasoning item, then its reasoning text parts (where a server
    returns them)."""
    texts = [getattr(part, "text", None) for part in (getattr(item, "summary", None) or ())]
    texts += [getattr(part, "text", None) for part in (getattr(item, "content", None) or ())]
    return [text for text in texts if isinstance(text, str) and text]


def responses_reasoning(output: Sequence[Any]) -> str | None:
    """The reasoning text of a Responses API answer: every reasoning item's texts in order, one paragraph each;
    None when there is none (encrypted reasoning carries no text)."""
    texts = [text for item in output if item.type == "reasoning" for text in _reasoning_item_texts(item)]
    return "\n\n".join(texts) if texts else None


def parse_chat_completion(completion: Any) -> ParsedAnswer:
    if not isinstance(completion, openai_package().types.chat.ChatCompletion):
        raise MalformedResponse(f"expected a chat completion, got {one_line(repr(completion), 200)}")
    if not completion.choices or completion.choices[0].message is None:
        raise MalformedResponse(f"chat completion {completion.id!r} has no choices")
    choice = completion.choices[0]
    calls = tuple(
        ToolCall(call.id, call.function.name, call.function.arguments or "")
        for call in (choice.message.tool_calls or ())
        if getattr(call, "function", None) is not None
    )
    usage = _usage_from(completion.usage, "prompt_tokens", "completion_tokens")
    return ParsedAnswer(
        choice.message.content,
        calls,
        choice.finish_reason,
        completion.id,
        usage,
        extra=completion.model_extra,
        reasoning=chat_reasoning(choice.message),
    )


def _responses_finish_reason(response: Any, has_calls: bool) -> str:
    if response.status == "incomplete":
        reason = getattr(response.incomplete_details, "reason", None)
        return "length" if reason == "max_output_tokens" else str(reason or "incomplete")
    return "tool_calls" if has_calls else "stop"


def parse_responses_response(response: Any) -> ParsedAnswer:
    if not isinstance(response, openai_package().types.responses.Response):
        raise MalformedResponse(f"expected a response object, got {one_line(repr(response), 200)}")
    if response.status == "failed":
        detail = getattr(response.error, "message", None) or "no detail"
        raise MalformedResponse(f"response {response.id!r} failed: {detail}")
    if not isinstance(response.output, list):
        raise MalformedResponse(f"response {response.id!r} has no output")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for item in response.output:
        if item.type == "message":
            texts.extend(part.text for part in item.content if getattr(part, "type", None) == "output_text")
        elif item.type == "function_call":
            calls.append(ToolCall(item.call_id, item.name, item.arguments or ""))
    text = "".join(texts) if texts else None
    items = tuple(item.model_dump(mode="json", exclude_none=True) for item in response.output)
    usage = _usage_from(response.usage, "input_tokens", "output_tokens")
    finish = _responses_finish_reason(response, bool(calls))
    return ParsedAnswer(
        text,
        tuple(calls),
        finish,
        response.id,
        usage,
        items,
        response.model_extra,
        responses_reasoning(response.output),
    )
