"""`doit export`: the flat steps table (CSV, JSONL) and the inspect_ai log, read back with inspect_ai itself."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stages.config.settings import Settings
from stages.export.inspect_log import chat_message, plain
from stages.export.stage import ExportError, write_export
from stages.export.steps import COLUMNS, StepRow, csv_text, spreadsheet_safe
from stages.storage.artifacts import write_artifact
from stages.storage.json_values import JSONObject
from tests.support.run_artifacts import (
    ZERO_SHA,
    json_at,
    json_str,
    make_settings,
    selection_entry,
    write_details,
    write_selection,
)

FORMULA_REASON = '=HYPERLINK("http://evil.example", "click") raised'
SCRIPT_ANSWER = "<script>alert(1)</script>\n```python\ndef f():\n    return 1\n```"

REASONING = "the tool said 42, so f returns 1"


def generated_step(step_id: str, *, tool: bool = False) -> dict[str, Any]:
    call = {
        "id": f"call-{step_id}",
        "type": "function",
        "function": {"name": "code_interpreter", "arguments": '{"code": "print(42)"}'},
    }
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"prompt of {step_id}"}]
    if tool:
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "name": "code_interpreter", "content": "42\n"},
        ]
    final: dict[str, Any] = {"role": "assistant", "content": SCRIPT_ANSWER}
    if tool:
        final["reasoning"] = REASONING
    messages.append(final)
    return {
        "step_id": step_id,
        "prefilled": False,
        "status": "ok",
        "prompt_fingerprint": ZERO_SHA,
        "code": "def f():\n    return 1\n",
        "raw_answer": SCRIPT_ANSWER,
        "error": None,
        "finish_reason": "stop",
        "usage": {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150, "calls": 2 if tool else 1},
        "latency_s": 1.5,
        "trajectory": {
            "messages": messages,
            "calls": [{"latency_s": 0.75, "usage": {"input_tokens": 60, "output_tokens": 15, "total_tokens": 75}}],
            "tool_results": [
                {
                    "call_id": call["id"],
                    "name": "code_interpreter",
                    "status": "ok",
                    "duration_s": 0.25,
                    "truncated": False,
                    "output": "42\n",
                }
            ]
            if tool
            else [],
        },
    }


def write_generation(settings: Settings, problem_id: str, steps: list[dict[str, Any]]) -> None:
    write_artifact(
        settings.run_paths.generation(problem_id),
        "generation",
        {
            "fingerprint": ZERO_SHA,
            "status": "complete",
            "problem_id": problem_id,
            "attempt": 0,
            "model": settings.model,
            "mode": "tool_use",
            "error": None,
            "usage": {"input_tokens": 240, "output_tokens": 60, "total_tokens": 300},
            "latency_s": 3.0,
            "steps": list(steps),
        },
    )


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Settings, list[Path]]:
    """P1: pass, pass (the first with a tool call); P2: pass, fail with a formula-like reason, prefilled last;
    P3: no details file."""
    settings = make_settings(tmp_path, model="acme-coder")
    write_selection(
        settings,
        [
            selection_entry("P1", "physics", 2, 2),
            selection_entry("P2", "physics", 3, 2),
            selection_entry("P3", "physics", 1, 1),
        ],
    )
    write_generation(settings, "P1", [generated_step("P1.1", tool=True), generated_step("P1.2")])
    write_generation(settings, "P2", [generated_step("P2.1"), generated_step("P2.2")])
    write_details(settings, "P1", "physics", [("P1.1", "pass"), ("P1.2", "pass")])
    path = write_details(settings, "P2", "physics", [("P2.1", "pass"), ("P2.2", "fail"), ("P2.3", "skipped")])
    record = json.loads(path.read_text(encoding="utf-8"))
    record["attempts"][0]["meta"]["evaluation"]["steps"][1]["reason"] = FORMULA_REASON
    path.write_text(json.dumps(record), encoding="utf-8")
    return settings, write_export(settings)


def test_steps_table_has_one_row_per_step(exported) -> None:
    settings, files = exported
    paths = settings.run_paths
    assert files[:2] == [paths.export_steps_csv, paths.export_steps_jsonl]
    rows = [json.loads(line) for line in paths.export_steps_jsonl.read_text(encoding="utf-8").splitlines()]
    assert [(row["problem"], row["step"], row["status"]) for row in rows] == [
        ("P1", "P1.1", "pass"),
        ("P1", "P1.2", "pass"),
        ("P2", "P2.1", "pass"),
        ("P2", "P2.2", "fail"),
        ("P2", "P2.3", "skipped"),
        ("P3", "P3.1", "no_verdict"),
    ]
    first = rows[0]
    assert tuple(first) == COLUMNS
    assert first["run"] == "acme-coder/test-tool_use-bg" and first["attempt"] == 1
    assert (first["input_tokens"], first["output_tokens"], first["total_tokens"]) == (120, 30, 150)
    assert (first["tool_calls"], first["tool_duration_s"], first["test_duration_s"]) == (1, 0.25, 0.25)
    assert rows[3]["reason"] == FORMULA_REASON  # JSONL keeps the text exactly
    assert rows[5]["reason"] == "no details file" and rows[5]["input_tokens"] is None


def test_csv_cells_never_run_as_formulas(exported) -> None:
    settings, _ = exported
    text = settings.run_paths.export_steps_csv.read_bytes().decode("utf-8")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert len(rows) == 6 and list(rows[0]) == list(COLUMNS)
    assert rows[3]["reason"] == "'" + FORMULA_REASON
    assert rows[5]["input_tokens"] == ""  # unknown numbers are empty cells
    for start in ("=", "+", "-", "@", "\t", "\r"):
        assert spreadsheet_safe(start + "1") == "'" + start + "1"
    assert spreadsheet_safe(-1.5) == -1.5 and spreadsheet_safe("fine") == "fine"


SPLIT_ON = re.compile(r"[,;\t\r\n]")


def reason_row(reason: str) -> StepRow:
    return StepRow(
        "r", "m", "1", "1.1", 1, "fail", reason, 1, 1, 2, None, 1, 0.5, 0.25, 0, 0.0, "F", "S", "test", "original"
    )


def test_a_cell_split_on_semicolons_runs_no_formula() -> None:
    """Issue 30, finding 7: model text with a `;` but no comma or quote was written unquoted, and a spreadsheet
    that splits on `;` showed a cell beginning `=HYPERLINK(...)`: every text cell is quoted now, and every segment
    a spreadsheet may split off is guarded, not only the cell's first character."""
    reason = 'AssertionError;=HYPERLINK(CHAR(104)&"ttp://x","see")'
    line = csv_text([reason_row(reason)]).splitlines()[1]
    guarded = '"AssertionError;\'=HYPERLINK(CHAR(104)&""ttp://x"",""see"")"'
    assert line == f'"r","m","1","1.1",1,"fail",{guarded},1,1,2,"",1,0.5,0.25,0,0.0,"F","S","test","original",""'
    for separator in (",", ";", "\t", "\n"):
        assert spreadsheet_safe(f"ok{separator} @SUM(A1)") == f"ok{separator} '@SUM(A1)"


def test_a_quote_or_white_space_after_a_separator_does_not_hide_a_formula() -> None:
    """Issue 39, finding 10: `;"=...` is the quoted field `=...` to a spreadsheet splitting on `;`."""
    for gap in ('"', "'", ' "', '" ', "\u00a0", "\u3000", '""'):
        assert spreadsheet_safe(f'ok;{gap}=HYPERLINK("x")') == f'ok;{gap}\'=HYPERLINK("x")'
        assert spreadsheet_safe(f"{gap}-1+1") == f"{gap}'-1+1"


FORMULA_PIECES = st.text(alphabet=st.sampled_from(list(",;\t\r\n \"'=+-@a\u00a0")), max_size=12)
LEADING_GAP = re.compile(r'^[\s"]*')  # before the field's first character (a leading `'` makes a field text)


@given(
    st.text(max_size=40)
    | FORMULA_PIECES
    | st.sampled_from(["\r", "a\rb", "\r\n", "=cmd|' /C calc'!A0", "a;-1", "x,\t=1", 'a;"=1', "a, '@x"])
)
def test_any_reason_survives_the_csv_guarded(reason: str) -> None:
    (parsed,) = list(csv.DictReader(io.StringIO(csv_text([reason_row(reason)]), newline="")))
    cell = parsed["reason"]
    assert cell == spreadsheet_safe(reason)
    assert not cell.startswith(("\t", "\r"))
    segments = SPLIT_ON.split(cell)
    assert all(not LEADING_GAP.sub("", segment).startswith(("=", "+", "-", "@")) for segment in segments)


def test_inspect_ai_reads_the_log(exported) -> None:
    from inspect_ai.log import EvalSample, list_eval_logs, read_eval_log
    from inspect_ai.model import ChatMessageAssistant, ContentReasoning
    from inspect_ai.scorer import Score

    def scores(sample: EvalSample) -> dict[str, Score]:
        assert sample.scores is not None
        return sample.scores

    settings, files = exported
    log_path = files[2]
    assert log_path.parent == settings.run_paths.export_inspect_dir
    log = read_eval_log(str(log_path))
    assert log.status == "success" and log.eval.task == "scicode" and log.eval.model == "acme-coder"
    assert log.samples is not None and log.results is not None
    assert [sample.id for sample in log.samples] == ["P1", "P2", "P3"]
    p1, p2, p3 = log.samples
    assert scores(p1)["steps"].value == {"P1.1": "pass", "P1.2": "pass"}
    assert scores(p2)["steps"].value == {"P2.1": "pass", "P2.2": "fail", "P2.3": "skipped"}
    assert scores(p3)["steps"].value == {"P3.1": "no_verdict"}
    assert [scores(s)["main_problem_resolved"].value for s in log.samples] == [1, 0, 0]
    assert scores(p2)["subproblem"].value == 0.5
    assert [message.role for message in p1.messages] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    tool_call, answer = p1.messages[1], p1.messages[3]
    assert isinstance(tool_call, ChatMessageAssistant) and tool_call.tool_calls is not None
    assert tool_call.tool_calls[0].arguments == {"code": "print(42)"}
    assert not isinstance(answer.content, str) and isinstance(answer.content[0], ContentReasoning)
    assert answer.content[0].type == "reasoning" and answer.content[0].reasoning == REASONING
    assert answer.text == SCRIPT_ANSWER
    assert p1.input == "prompt of P1.1" and p1.output.completion == SCRIPT_ANSWER
    resolve = next(score for score in log.results.scores if score.name == "main_problem_resolved")
    # 1 of 3 resolved; Wilson: centre = (1 + 1.920729) / 6.841459 = 0.426916,
    # half = 1.959964 / 6.841459 * sqrt(2/3 + 0.960365) = 0.286483 * 1.275552 = 0.365424 -> [0.061492, 0.792340]
    assert resolve.metrics["accuracy"].value == pytest.approx(1 / 3)
    assert resolve.metrics["ci_low"].value == pytest.approx(0.061492, abs=2e-6)
    assert resolve.metrics["ci_high"].value == pytest.approx(0.792340, abs=2e-6)
    assert resolve.metadata is not None
    assert resolve.metadata["interval"].startswith("95% Wilson score interval over problems")
    steps = next(score for score in log.results.scores if score.name == "subproblem")
    # steps (passed, scored) (2, 2), (1, 2), (0, 1): N = 5, p = 0.6; sums 0.8, -0.2, -0.6: V_cl = 1.04 / 25 = 0.0416
    # below V_bin = 0.24 / 5 = 0.048: deff 1, n_eff 5: Wilson of 3 of 5 = [0.230723, 0.882379]
    # Issue 39, finding 10: `mean` is the mean of the sample values (1, 1/2, 0), as inspect's own mean would be;
    # it was the micro rate 3/5, which carries its own name now.
    sample_values = [float(value) for s in log.samples if isinstance(value := scores(s)["subproblem"].value, float)]
    assert sample_values == [1.0, 0.5, 0.0]
    assert steps.metrics["mean"].value == pytest.approx(sum(sample_values) / 3) == pytest.approx(0.5)
    assert steps.metrics["micro_rate"].value == pytest.approx(0.6)
    assert steps.metrics["micro_rate_stderr"].value == pytest.approx(math.sqrt(0.0416), abs=1e-9)
    assert steps.metrics["micro_rate_ci_low"].value == pytest.approx(0.230723, abs=2e-6)
    assert steps.metrics["micro_rate_ci_high"].value == pytest.approx(0.882379, abs=2e-6)
    assert not {"stderr", "ci_low", "ci_high"} & set(steps.metrics)
    assert steps.metadata is not None
    assert steps.metadata["interval"].startswith("95% clustered Wilson") and steps.metadata["effective_n"] == 5.0
    listed = list_eval_logs(str(log_path.parent))
    assert [Path(info.name.removeprefix("file://")).name for info in listed] == [log_path.name]
    assert listed[0].task == "scicode"


HOSTILE_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=20) | st.sampled_from(
    ["\ud800", "x\udfffy", "\x00", "=1+1"]
)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | HOSTILE_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(HOSTILE_TEXT, inner, max_size=3),
    max_leaves=20,
)


@given(
    st.sampled_from(["user", "system", "developer", "assistant", "tool", "other", None]),
    JSONISH,
    st.lists(
        st.dictionaries(
            st.sampled_from(["id", "function", "type"]),
            JSONISH | st.fixed_dictionaries({"name": HOSTILE_TEXT, "arguments": HOSTILE_TEXT | JSONISH}),
        ),
        max_size=2,
    ),
)
def test_any_trajectory_message_becomes_a_writable_chat_message(role, content, calls) -> None:
    message = {"role": role, "content": content, "tool_calls": calls, "tool_call_id": content, "name": content}
    found = chat_message(message, "1.1", "m")
    json.dumps(plain(found), ensure_ascii=False, allow_nan=False).encode("utf-8")  # never raises


def test_deeply_nested_tool_arguments_are_kept_as_text() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    call: JSONObject = {"id": "c", "function": {"name": "code_interpreter", "arguments": deep}}
    found = chat_message({"role": "assistant", "content": None, "tool_calls": [call]}, "1.1", "m")
    assert found is not None and json_str(json_at(found, "tool_calls", 0, "parse_error")).startswith(
        "arguments are not"
    )
    nested: Any = "leaf"
    for _ in range(200):
        nested = {"k": nested}
    json.dumps(plain(nested))  # cut at MAX_DEPTH, never a RecursionError


def test_a_second_export_replaces_the_log(exported) -> None:
    settings, files = exported
    again = write_export(settings)
    assert again[2] == files[2] and sorted(settings.run_paths.export_inspect_dir.iterdir()) == [files[2]]


def test_export_of_a_folder_without_a_run_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="cannot export .*no run of model=nobody .*run `doit select`"):
        write_export(make_settings(tmp_path, model="nobody"))


def test_export_of_a_missing_run_lists_the_runs_of_the_model(exported, tmp_path: Path) -> None:
    """`doit export model=X` for a run folder that does not exist names the runs that exist for X."""
    with pytest.raises(ExportError) as refused:
        write_export(make_settings(tmp_path, model="acme-coder", split="validation"))
    assert "runs of model=acme-coder that exist: test-tool_use-bg; name one with run=<name>" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_cost_per_step_and_the_log_total_cost_at_the_run_prices(tmp_path: Path) -> None:
    """With prices set, steps.csv has each step's cost and the inspect log's model usage its total_cost."""
    from inspect_ai.log import read_eval_log

    from stages.select.stage import write_run_config

    settings = make_settings(tmp_path, model="acme-coder", price_input_per_mtok="2", price_output_per_mtok="10")
    write_selection(settings, [selection_entry("P1", "physics", 2, 2)])
    write_run_config(settings)
    write_generation(settings, "P1", [generated_step("P1.1", tool=True), generated_step("P1.2")])
    write_details(settings, "P1", "physics", [("P1.1", "pass"), ("P1.2", "pass")])
    files = write_export(settings)
    rows = list(csv.DictReader(io.StringIO(files[0].read_text(encoding="utf-8"), newline="")))
    step_cost = (120 * 2 + 30 * 10) / 1e6  # 120 tokens in, 30 out
    assert [float(row["cost_usd"]) for row in rows] == [pytest.approx(step_cost)] * 2
    log = read_eval_log(str(files[2]))
    assert log.stats.model_usage["acme-coder"].total_cost == pytest.approx(2 * step_cost)
    assert log.samples is not None and log.samples[0].model_usage["acme-coder"].total_cost == pytest.approx(
        2 * step_cost
    )
    unpriced = make_settings(tmp_path / "unpriced", model="acme-coder")
    write_selection(unpriced, [selection_entry("P1", "physics", 1, 1)])
    write_run_config(unpriced)
    write_generation(unpriced, "P1", [generated_step("P1.1")])
    write_details(unpriced, "P1", "physics", [("P1.1", "pass")])
    assert next(csv.DictReader(io.StringIO(write_export(unpriced)[0].read_text(encoding="utf-8"))))["cost_usd"] == ""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_inspect_view_lists_and_serves_the_log(exported) -> None:
    settings, files = exported
    port = _free_port()
    inspect = Path(sys.executable).with_name("inspect")
    server = subprocess.Popen(
        [
            str(inspect),
            "view",
            "--log-dir",
            str(settings.run_paths.export_inspect_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        listing = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and listing is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/log-files", timeout=5) as reply:
                    listing = json.loads(reply.read())
            except OSError:
                assert server.poll() is None, server.stderr.read().decode() if server.stderr else ""
                time.sleep(0.5)
        assert listing is not None, "inspect view did not answer"
        names = [Path(entry["name"].removeprefix("file://")).name for entry in listing["files"]]
        assert names == [files[2].name] and listing["files"][0]["task"] == "scicode"
        listed = urllib.parse.quote(listing["files"][0]["name"], safe="")  # the viewer serves logs by listed name
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/logs/{listed}", timeout=30) as reply:
            served = json.loads(reply.read())
        assert [sample["id"] for sample in served["samples"]] == ["P1", "P2", "P3"]
    finally:
        server.terminate()
        server.wait(timeout=20)
