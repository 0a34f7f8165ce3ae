"""Hostile answers in real doit runs: none of them stops a task, every step gets a verdict, every file is written.

The answers of issue 20 (Why 4 and 5), each on its own validation problem, through a local model server and
the real `openai` client in tool_use mode (so that tool-call arguments can be hostile too), scored with the
real engine against the validation targets, under `carry=definition` (which renders carried code with
`ast.unparse`).
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path

from stages.generate.server import ModelReply, ModelRequest, Reply, ToolCallSpec
from tests.support.hostile import DEEP_UNARY, DEEPER_UNARY
from tests.support.pipeline_support import (
    PROBE_REPLY,
    TEST_API_KEY,
    data_args,
    is_preflight_probe,
    load_json,
    model_args,
    output_of,
    run_dir,
    run_doit,
    step_asked,
    step_statuses,
    steps_of,
)
from tests.support.run_files import report_file, summary_file

HOSTILE_PROBLEMS = ("1", "3", "4", "6", "7", "19")
SURROGATE_CALL = ToolCallSpec("call_\ud800", "code_interpreter", '{"code": "print(\'\\ud800\')"}')
HOSTILE_ANSWERS: dict[str, str] = {
    "1.1": DEEP_UNARY,  # unfenced: ast.parse raised RecursionError in the generation task
    "3.1": f"```python\n{DEEP_UNARY}\n```",  # fenced: taken as written, fails when tested
    "4.1": "```python\ndef ichol(A):\n    return '\ud800'\n```",  # a lone surrogate in the answer text
    "6.1": DEEPER_UNARY,  # unfenced: ast.parse raised MemoryError
    "7.1": "def f(x):\x00\n    return x\n",  # a null byte
    "19.1": "def tensor(*args):\n    return args\n```",  # a lone closing fence: no code
    "19.2": "```python\ndef f(:\n```",
}


def hostile_model(steps: dict) -> object:
    """Answers each step with its hostile text; step 4.1 first calls the tool with a lone surrogate in the
    arguments and in the call id."""

    def respond(request: ModelRequest) -> Reply:
        if is_preflight_probe(request):
            return PROBE_REPLY
        step_id = step_asked(request, steps)
        called = any(message.get("role") == "tool" for message in request.messages)
        if step_id == "4.1" and request.tools and not called:
            return ModelReply(tool_calls=(SURROGATE_CALL,))
        return ModelReply(text=HOSTILE_ANSWERS[step_id], prompt_tokens=10, completion_tokens=10)

    return respond


def test_hostile_answers_end_as_verdicts_and_every_file_is_written(
    workdir: Path, staged_data_dir: Path, dev_targets: Path, start_server
) -> None:
    steps = steps_of(staged_data_dir, HOSTILE_PROBLEMS, "validation")
    server = start_server(hostile_model(steps))
    result = run_doit(
        workdir,
        *data_args(staged_data_dir, dev_targets),
        *model_args(server),
        "split=validation",
        f"sample_ids={','.join(HOSTILE_PROBLEMS)}",
        "carry=definition",
        "tool_use_max_loops=3",
        api_key=TEST_API_KEY,
    )
    output = output_of(result)
    assert "Traceback" not in output and "FAILED generate" not in output and "FAILED score" not in output, output
    run = run_dir(workdir, "acme-coder-1", "validation-tool_use-bg-carrydef")
    statuses = step_statuses(run / "details")
    assert set(statuses) == set(HOSTILE_ANSWERS)
    assert {step: statuses[step] for step in ("1.1", "6.1", "7.1", "19.1")} == dict.fromkeys(
        ("1.1", "6.1", "7.1", "19.1"), "parse_error"
    )
    assert statuses["4.1"] == "fail" and statuses["19.2"] == "fail" and statuses["3.1"] != "pass"
    generation = load_json(run / "generations" / "4.json")
    [step] = generation["steps"]
    assert step["code"] == "\ndef ichol(A):\n    return '\ufffd'\n"
    assert step["trajectory"]["tool_results"][0]["output"] == "\ufffd\n"
    assert step["trajectory"]["tool_results"][0]["call_id"] == "call_\ufffd"
    summary = load_json(summary_file(run, "json"))
    assert summary["subproblem_total"] == 7 and summary["subproblem_correct"] == 0
    assert summary_file(run, "md").is_file()
    json.dumps(summary, ensure_ascii=False).encode("utf-8")
    # issue 21: the report of a lone-closing-fence step says "no test script" and shows no traceback
    view = step_view(report_file(run).read_text(encoding="utf-8"), "19.1")
    assert "no test script: the step has no code" in view and "Traceback" not in view
    assert "no code in the answer (no_code): its code block is empty" in view


def step_view(page: str, step_id: str) -> str:
    """The rendered views of one step, from the report's compressed step data."""
    blob = re.search(rf'id="z-{re.escape(step_id)}" data-encoding="gzip\+base64">([^<]*)<', page)
    assert blob is not None, f"no step view of {step_id}"
    return gzip.decompress(base64.b64decode(blob.group(1))).decode("utf-8")
