"""A reply that holds a number JSON cannot write (`1e999`, `NaN`, `-Infinity`, in a Responses output item or in a
chat reply's message) is turned by the trusted side into a writable record: the number becomes text, the answer is
recorded once, and a rerun asks nothing (real `openai` client against a hostile stand-in endpoint on 127.0.0.1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stages.config.settings import load_settings
from stages.generate.stage import generation_current, generation_path, run_generate
from stages.storage.artifacts import read_artifact
from tests.support.hostile_services import HostileServer, Json, RawJson, chat_body, responses_body
from tests.support.pipeline_support import steps_of

NON_FINITE = {"1e999": "inf", "NaN": "nan", "-Infinity": "-inf"}
PLACEHOLDER = '"non-finite-placeholder"'


def hostile_body(protocol: str, answer: str, token: str) -> RawJson:
    """An answer whose body holds `token` as a number: in an extra Responses output item, or in the chat message."""
    if protocol == "openai-responses":
        body = responses_body(answer)
        body["output"].insert(0, {"type": "reasoning", "id": "rs_1", "summary": [], "score": "non-finite-placeholder"})
    else:
        body = chat_body(answer)
        body["choices"][0]["message"]["confidence"] = "non-finite-placeholder"
        body["choices"][0]["logprobs"] = {"mean": "non-finite-placeholder"}
    return RawJson(json.dumps(body).replace(PLACEHOLDER, token))


@pytest.mark.parametrize("protocol", ["openai-responses", "openai-chat"])
@pytest.mark.parametrize("token", list(NON_FINITE))
def test_a_non_finite_number_in_a_reply_is_recorded_as_text(
    tmp_path: Path, staged_data_dir: Path, protocol: str, token: str
) -> None:
    [step] = steps_of(staged_data_dir, ("1",), "validation").values()
    answer = f"```python\n{step.ground_truth_code}\n```"
    with HostileServer(lambda request: Json(hostile_body(protocol, answer, token))) as server:
        settings = load_settings(
            {
                "model": "acme-coder-1",
                "base_url": f"{server.url}/v1",
                "api_protocol": protocol,
                "mode": "naive",
                "split": "validation",
                "data_dir": str(staged_data_dir),
                "results_dir": str(tmp_path / "results"),
            },
            cwd=tmp_path,
        )
        record = run_generate(settings, "1")
        asked = len(server.requests)
        assert record["status"] == "complete"
        assert generation_current(settings, "1")
        assert run_generate(settings, "1") == record
        assert len(server.requests) == asked  # recorded once: nothing is asked again
    written: Any = read_artifact(generation_path(settings, "1"), "generation")
    assert written is not None and written["steps"][0]["status"] == "ok"
    if protocol == "openai-responses":  # the output items are kept as they came (a chat message's own fields)
        assert f'"score": "{NON_FINITE[token]}"' in json.dumps(written)
