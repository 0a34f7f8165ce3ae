"""Endpoint preflight: before the first model call, one line for each way the endpoint cannot serve the run.

`check_endpoint(settings)` runs, in order, and stops at the first failure with `EndpointCheckFailed` (one line and
an exit code of its own, `stages.exit_codes`):

1. a key, for any endpoint not on this machine (localhost, 127.0.0.0/8, ::1 need none);
2. the endpoint answers, and `GET /models` where the server has it: `model=` must be one of the served ids
   (`<model>:latest` counts, as Ollama lists it), unless `check_model=false` (gateways whose list holds aliases);
3. the chosen protocol answers a one-line request (with the run's `model_params`, the output capped at
   PROBE_TOKENS): a 404 on `/responses` says the server has no Responses API;
4. in tool_use, one such request that offers the run's tools (and the first call's `tool_choice`), to learn
   whether the server accepts them;
5. for a server on this machine or a private network, notes that stop nothing (`stages.preflight.local_server`):
   `max_tokens` unset, and a server that serves fewer requests at once than `concurrency`.

The preflight task calls it only when some step will call a model that is not built in; the probes go through the
run's own client (`ModelClient`), with at most PROBE_RETRIES retries of transient failures and no wait for a server
that refuses connections (a dead endpoint is one line at once, not minutes of retries).

`check_scheduler(settings)`: with `executor=dask scheduler=...`, the scheduler accepts a TCP connection.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from stages.config.settings import Settings
from stages.errors import RunStopped
from stages.execution.untrusted import shown
from stages.exit_codes import (
    ENDPOINT_UNREACHABLE,
    KEY_REFUSED,
    MODEL_NOT_SERVED,
    NO_API_KEY,
    PROTOCOL_NOT_SERVED,
    SCHEDULER_UNREACHABLE,
    TOOLS_REFUSED,
    ExitCode,
)
from stages.preflight.local_server import local_server_notes

if TYPE_CHECKING:
    from stages.generate.client import ModelCallError, ModelClient

PROBE_PROMPT = "Reply with the single word: ok"
PROBE_TOOLS_PROMPT = "Call the code_interpreter tool to print 1, or reply with the single word: ok"
PROBE_TOKENS = 16  # the smallest cap every API accepts (OpenAI's Responses API wants at least 16)
PROBE_RETRIES = 2
PROBE_STEP_ID = "preflight"
MODELS_SHOWN = 12
SCHEDULER_TIMEOUT_SECONDS = 5.0
DASK_DEFAULT_PORT = 8786
TOOL_SERVER_HINT = (
    "start the server with tool calling (llama.cpp: --jinja; llama-cpp-python: --chat_format "
    "chatml-function-calling; vLLM: --enable-auto-tool-choice), set another tool_choice=, or use mode=naive"
)
# The server took the same request without its tool_choice: it serves tool calls and refuses only that choice.
TOOL_CHOICE_HINT = (
    "it accepts the same request without tool_choice={choice}, so it serves tool calls but not that choice: "
    "leave tool_choice unset (or set tool_choice=auto){forcing}"
)
FORCING_HINT = ", or name a tool to force a call (tool_choice={tool})"  # when the refused choice is not a tool name
Probe = Literal["models", "protocol", "tools"]


class EndpointCheckFailed(RunStopped):
    """The endpoint (or the Dask scheduler) cannot serve the run: one line, its own exit code, no model called."""


PREFLIGHT_LINE_LIMIT = 2000  # characters of one preflight line (the endpoint's text in it included)


def preflight_line(line: str) -> str:
    """A preflight line as the terminal shows it: the endpoint's text in it (model ids, error messages) neutralised,
    so no escape sequence it holds can rewrite the line or forge another."""
    return shown(line, limit=PREFLIGHT_LINE_LIMIT)


def _failed(line: str, exit_code: ExitCode) -> EndpointCheckFailed:
    return EndpointCheckFailed(preflight_line(f"preflight: {line} (no model call was made)"), exit_code.code)


# ---------------------------------------------------------------------------
# The model endpoint
# ---------------------------------------------------------------------------


def check_endpoint(settings: Settings) -> list[str]:
    """The endpoint checks of the module docstring; the lines to print. EndpointCheckFailed on the first failure."""
    from stages.generate import builtin
    from stages.generate.client import ModelCallError, ModelClient

    if builtin.is_builtin_model(settings.model):
        return []
    probe_settings = dataclasses.replace(settings, max_retries=min(settings.max_retries, PROBE_RETRIES))
    try:
        client = ModelClient(probe_settings, wait_for_server=False)
    except ModelCallError as error:  # no key for a remote endpoint: nothing was sent
        raise _failed(error.message, NO_API_KEY) from None
    with client:
        served = _served_models(settings, client)
        model_note = _check_model(settings, served, client.endpoint)
        elapsed = _probe(settings, client, "protocol")
        tools_note = _probe_tools(settings, client) if settings.mode == "tool_use" else ""
        notes = local_server_notes(settings, client, lambda probed: _probe(settings, probed, "protocol"))
    return [
        f"endpoint ok: {client.endpoint} {model_note}; {settings.api_protocol} answered in {elapsed:.1f} s{tools_note}",
        *notes,
    ]


def _served_models(settings: Settings, client: ModelClient) -> list[str] | None:
    from stages.generate.client import ModelCallError

    try:
        return client.list_models()
    except ModelCallError as error:
        raise _failure_of(settings, error, "models", client.endpoint) from None


def model_is_served(model: str, served: list[str]) -> bool:
    return model in served or f"{model}:latest" in served


def _check_model(settings: Settings, served: list[str] | None, endpoint: str) -> str:
    if not served:
        return f"has no model list (GET /models), model={settings.model} not checked"
    if model_is_served(settings.model, served):
        return f"serves model={settings.model}"
    if not settings.check_model:
        return f"does not list model={settings.model} (check_model=false)"
    listed = ", ".join(served[:MODELS_SHOWN]) + (
        f" and {len(served) - MODELS_SHOWN} more" if len(served) > MODELS_SHOWN else ""
    )
    raise _failed(
        f"model={settings.model} is not served by {endpoint}, which serves: {listed} (set model= to one of them, or "
        "check_model=false for a gateway whose list holds aliases)",
        MODEL_NOT_SERVED,
    )


def _probe(settings: Settings, client: ModelClient, probe: Probe, *, forced: bool = True) -> float:
    """One tiny request (with the run's tools for the tools probe, and the first call's tool_choice unless
    `forced` is off); its wall time."""
    from stages.generate.client import ModelCallError

    try:
        return _timed_probe(settings, client, probe, forced=forced)
    except ModelCallError as error:
        failure = _failure_of(settings, error, probe, client.endpoint)
        if failure.exit_code == TOOLS_REFUSED.code and _tools_without_choice(settings, client, probe):
            failure = _failure_of(settings, error, probe, client.endpoint, serves_tools=True)
        raise failure from None


def _timed_probe(settings: Settings, client: ModelClient, probe: Probe, *, forced: bool) -> float:
    from stages.generate.loops import tool_choice_for_call
    from stages.generate.tools import tool_schemas

    tools = tool_schemas(settings.tool_names, settings.api_protocol) if probe == "tools" else None
    choice = tool_choice_for_call(settings.tool_choice, 0) if probe == "tools" and forced else None
    prompt = PROBE_TOOLS_PROMPT if probe == "tools" else PROBE_PROMPT
    started = time.monotonic()
    client.complete(
        [{"role": "user", "content": prompt}],
        tools=tools,
        step_id=PROBE_STEP_ID,
        tool_choice=choice,
        max_tokens=PROBE_TOKENS,
    )
    return time.monotonic() - started


def _tools_without_choice(settings: Settings, client: ModelClient, probe: Probe) -> bool:
    """After the tools probe failed with a tool_choice: whether the same request without it is accepted (the
    server serves tool calls, and refuses only that choice, as llama-cpp-python's function-calling format refuses
    `required`). One more tiny request; False for any other probe or failure."""
    from stages.generate.client import ModelCallError

    if probe != "tools" or not settings.tool_choice:
        return False
    try:
        _timed_probe(settings, client, probe, forced=False)
    except ModelCallError:
        return False
    return True


def _probe_tools(settings: Settings, client: ModelClient) -> str:
    _probe(settings, client, "tools")
    choice = f" with tool_choice={settings.tool_choice}" if settings.tool_choice else ""
    return f"; a request with tools{choice} accepted"


def _tool_choice_hint(settings: Settings) -> str:
    """The advice for a server that serves tool calls but refuses the run's tool_choice."""
    named = settings.tool_choice in settings.tool_names
    forcing = "" if named or not settings.tool_names else FORCING_HINT.format(tool=settings.tool_names[0])
    return TOOL_CHOICE_HINT.format(choice=settings.tool_choice, forcing=forcing)


def _mentions_model(detail: str) -> bool:
    lowered = detail.lower()
    return "model" in lowered and any(word in lowered for word in ("not found", "does not exist", "unknown", "no such"))


def _failure_of(
    settings: Settings, error: ModelCallError, probe: Probe, endpoint: str, serves_tools: bool = False
) -> EndpointCheckFailed:
    """The one line and exit code of a probe's failure (`serves_tools`: the tools probe's request was accepted
    without its tool_choice)."""
    if error.kind == "auth":
        return _failed(f"{endpoint} refused the key in {settings.api_key_env}: {error.message}", KEY_REFUSED)
    if error.kind == "reply_refused":
        return _failed(f"{endpoint} sent a reply that is not read: {error.message}", PROTOCOL_NOT_SERVED)
    if error.status is None or error.kind == "unavailable":
        return _failed(f"{error.message} (is the server running at base_url={endpoint}?)", ENDPOINT_UNREACHABLE)
    if error.kind == "not_found" and _mentions_model(error.detail):
        return _failed(f"model={settings.model} is not served by {endpoint}: {error.message}", MODEL_NOT_SERVED)
    if error.kind == "not_found" and probe != "models":
        if settings.api_protocol == "openai-responses":
            return _failed(
                f"this server has no Responses API: use api_protocol=openai-chat ({error.message})",
                PROTOCOL_NOT_SERVED,
            )
        return _failed(
            f"{endpoint} has no Chat Completions API ({error.message}): check base_url= (it usually ends in /v1)",
            PROTOCOL_NOT_SERVED,
        )
    if probe == "tools":
        choice = f" with tool_choice={settings.tool_choice}" if settings.tool_choice else ""
        hint = _tool_choice_hint(settings) if serves_tools else TOOL_SERVER_HINT
        return _failed(
            f"{endpoint} refuses a request that offers tools{choice}: {error.message}; {hint}", TOOLS_REFUSED
        )
    return _failed(
        f"{endpoint} does not answer a one-line {settings.api_protocol} request for model={settings.model}: "
        f"{error.message} (check model=, model_params= and api_protocol=)",
        PROTOCOL_NOT_SERVED,
    )


# ---------------------------------------------------------------------------
# The Dask scheduler
# ---------------------------------------------------------------------------


def scheduler_address(address: str) -> tuple[str, int] | None:
    """(host, port) of a tcp/tls/ws/wss scheduler address; None for an in-process one."""
    parts = urlsplit(address)
    if parts.scheme == "inproc":
        return None
    try:
        port = parts.port or DASK_DEFAULT_PORT
    except ValueError:
        raise _failed(f"invalid scheduler={address}: the port is not a number", SCHEDULER_UNREACHABLE) from None
    return parts.hostname or "", port


def check_scheduler(settings: Settings) -> str | None:
    """One line when `executor=dask` names a `scheduler=` that accepts connections; EndpointCheckFailed if not."""
    if settings.executor != "dask" or not settings.scheduler:
        return None
    where = scheduler_address(settings.scheduler)
    if where is None:
        return None
    try:
        socket.create_connection(where, timeout=SCHEDULER_TIMEOUT_SECONDS).close()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise _failed(
            f"cannot reach the Dask scheduler at {settings.scheduler}: {reason} (start it, or drop scheduler= to "
            "score on a local cluster)",
            SCHEDULER_UNREACHABLE,
        ) from None
    return f"scheduler ok: {settings.scheduler} accepts connections"
