"""What the endpoint says of itself, asked once per process before its first answer is recorded.

Two GETs, each bounded (ENDPOINT_REPLY_BYTES, REPORT_TIMEOUT_SECONDS) and read totally: llama.cpp's `/props` at the
server's root, and `GET <base_url>/models` for the entry of `model=` (its id is the served model id; vLLM and
llama.cpp put the model's metadata there). A route that is absent, slow, refused, oversized or not JSON says
nothing: the record then holds only the base_url. The key, where there is one, is sent as the client sends it and
never recorded. The built-in models are described without a request.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from stages.config.settings import Settings
from stages.execution.service_replies import ENDPOINT_REPLY_BYTES, bounded_client, reply_json
from stages.records.endpoint import BUILTIN_ENDPOINT, EndpointRecord, endpoint_url, read_self_reports
from stages.storage.json_values import freeze_object

REPORT_TIMEOUT_SECONDS = 5.0
MODEL_ENTRIES_READ = 10_000  # entries of a /models list looked at
_DESCRIBED: dict[tuple[str, str], EndpointRecord] = {}
_LOCK = threading.Lock()


def _get_json(url: str, key: str | None) -> object:
    """The JSON of a 200 answer to GET `url`; None for anything else."""
    headers = {"Accept": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    try:
        with bounded_client(ENDPOINT_REPLY_BYTES, timeout=REPORT_TIMEOUT_SECONDS) as http:
            response = http.get(url, headers=headers)
            return reply_json(response.content) if response.status_code == 200 else None
    except Exception:  # noqa: BLE001 - unreadable, refused, timed out (httpx2's own errors): "not said"
        return None


def model_entry(models_reply: object, model: str) -> Mapping[str, object] | None:
    """The entry of `model` (or `<model>:latest`, as Ollama lists it) in a `GET /models` reply; None when absent."""
    data = models_reply.get("data") if isinstance(models_reply, Mapping) else None
    entries = data[:MODEL_ENTRIES_READ] if isinstance(data, list) else []
    for wanted in (model, f"{model}:latest"):
        for entry in entries:
            if isinstance(entry, Mapping) and entry.get("id") == wanted:
                return entry
    return None


def server_root(url: str) -> str:
    """The origin of `url` (llama.cpp serves /props there, beside /v1)."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def describe(base_url: str, model: str, key: str | None) -> EndpointRecord:
    """The record of the endpoint at `base_url` serving `model` (module docstring)."""
    url = endpoint_url(base_url)
    request_base = (base_url or url).rstrip("/")
    entry = model_entry(_get_json(f"{request_base}/models", key), model)
    props = _get_json(f"{server_root(request_base)}/props", key)
    served = entry.get("id") if entry is not None else None
    return EndpointRecord(
        base_url=url,
        served_model=served if isinstance(served, str) else None,
        server=freeze_object(read_self_reports(props, entry)),
    )


def endpoint_of(settings: Settings) -> EndpointRecord:
    """The endpoint that answers `settings`' model calls, described once per process (base_url and model)."""
    from stages.generate.builtin import is_builtin_model

    if is_builtin_model(settings.model):
        return EndpointRecord(BUILTIN_ENDPOINT, settings.model)
    wanted = (settings.base_url, settings.model)
    with _LOCK:
        if wanted not in _DESCRIBED:
            _DESCRIBED[wanted] = describe(settings.base_url, settings.model, settings.api_key)
        return _DESCRIBED[wanted]
