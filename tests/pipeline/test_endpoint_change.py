"""The endpoint is part of the run: answers record the endpoint they came from, and a folder's answers are not resumed
against another endpoint unless `endpoint_change=resume` says so. Real doit runs against local model servers."""

from __future__ import annotations

import json
from pathlib import Path

from stages.exit_codes import CONFIG_ERROR
from stages.generate.server import ModelServer
from stages.storage.json_values import JSONObject
from tests.support.pipeline_support import (
    TEST_API_KEY,
    ScriptedModel,
    assert_ok,
    data_args,
    load_json,
    model_args,
    output_of,
    run_dir,
    run_doit,
    steps_of,
)
from tests.support.run_files import summary_file

PROBLEM = "1"
MODEL = "acme-coder-1"
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
PROPS: JSONObject = {
    "chat_template": TEMPLATE,
    "model_path": "/models/acme-q4.gguf",
    "default_generation_settings": {"n_ctx": 8192},
}


def test_a_rerun_against_another_endpoint_is_refused_and_resumes_only_on_purpose(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    steps = steps_of(staged_data_dir, (PROBLEM,))
    first_model, second_model = ScriptedModel(steps), ScriptedModel(steps)
    first = ModelServer(first_model, models=(MODEL,), pages={"/props": PROPS}).start()
    second = ModelServer(second_model, models=(MODEL,)).start()
    try:
        args = (*data_args(staged_data_dir, dev_targets), "split=validation", f"sample_ids={PROBLEM}", "mode=naive")
        assert_ok(run_doit(tmp_path, *args, *model_args(first, MODEL), api_key=TEST_API_KEY))
        run = run_dir(tmp_path, MODEL, "validation-naive-bg")
        generation = load_json(run / "generations" / f"{PROBLEM}.json")
        [endpoint] = generation["endpoints"]
        assert endpoint["base_url"] == first.base_url.rstrip("/") and endpoint["served_model"] == MODEL
        assert endpoint["server"]["model_file"] == "/models/acme-q4.gguf" and endpoint["server"]["context"] == 8192
        assert endpoint["server"]["chat_template"] == TEMPLATE
        assert {step.get("endpoint") for step in generation["steps"] if not step["prefilled"]} == {0}
        summary = summary_file(run, "md").read_text(encoding="utf-8")
        assert (
            f"- answered by: `{first.base_url.rstrip('/')} (serves {MODEL}; model file /models/acme-q4.gguf" in summary
        )
        assert first.base_url.rstrip("/") in json.dumps(load_json(summary_file(run, "json"))["setup"]["endpoints"])
        # the targets file is named, not the user's folders it lies in
        assert str(dev_targets.parent) not in summary and "test_data_dev.h5" in summary
        before = (run / "generations" / f"{PROBLEM}.json").stat().st_mtime_ns
        asked = first_model.total()

        refused = run_doit(tmp_path, *args, *model_args(second, MODEL), api_key=TEST_API_KEY)
        assert refused.returncode == CONFIG_ERROR.code, output_of(refused)
        [line] = refused.stderr.strip().splitlines()
        assert f'endpoint "{first.base_url.rstrip("/")}" -> "{second.base_url.rstrip("/")}"' in line, line
        assert "endpoint_change=resume" in line and "run=<name>" in line
        assert second.requests == [] and (run / "generations" / f"{PROBLEM}.json").stat().st_mtime_ns == before
        print(f"$ doit ... base_url={second.base_url}\n{refused.stderr}")

        # On purpose: the run goes on against the second server; its answers name it beside the first one's.
        (run / "generations" / f"{PROBLEM}.json").unlink()  # (a fresh answer to record, as after an error)
        resumed = run_doit(tmp_path, *args, *model_args(second, MODEL), "endpoint_change=resume", api_key=TEST_API_KEY)
        assert_ok(resumed)
        assert second_model.total() > 0 and first_model.total() == asked
        assert load_json(run / "identity.json")["settings"]["endpoint"] == second.base_url.rstrip("/")
        [endpoint] = load_json(run / "generations" / f"{PROBLEM}.json")["endpoints"]
        assert endpoint["base_url"] == second.base_url.rstrip("/") and "model_file" not in endpoint["server"]
        # the same endpoint again needs no word; the first one now would be the change
        assert_ok(run_doit(tmp_path, *args, *model_args(second, MODEL), api_key=TEST_API_KEY))
        back = run_doit(tmp_path, *args, *model_args(first, MODEL), api_key=TEST_API_KEY)
        assert back.returncode == CONFIG_ERROR.code, output_of(back)
    finally:
        first.stop()
        second.stop()
