"""The trusted side is total: every function of the doit process that touches model output, driven with hostile
text (`tests/support/hostile.py`) under the suite's hypothesis profile, returns a value (a verdict, a text, a record)
and never raises.

The entry points tested elsewhere with the same strategy: code extraction, import removal and carried code
(tests/benchmark/test_protocol.py), tool-call arguments (tests/generate/test_tools.py), untrusted JSON, `valid_text`
and the neutraliser `shown` (tests/execution/test_untrusted.py), artifact and text writes and fingerprints
(tests/storage/test_artifacts.py).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from doit.exceptions import TaskFailed
from doit.task import Task
from hypothesis import example, given
from hypothesis import strategies as st

from stages.benchmark.problems import Problem, problems_by_id
from stages.benchmark.protocol import CARRY_MODES, Carry
from stages.execution.untrusted import valid_data
from stages.generate.loops import final_status
from stages.progress.activity import Activity, StepFailure
from stages.progress.failures import describe_failure, step_failure_line
from stages.records import not_scored
from stages.records.generation import GeneratedStep, Generation, _tool_code
from stages.records.verdict import StepVerdict
from stages.score.checker.verdict_rules import verdict_before_running
from stages.score.parent.cache import VerdictCache, verdict_key
from stages.score.parent.limits import StepLimits
from stages.score.parent.script import build_step_script
from stages.storage.json_values import freeze_object
from stages.storage.paths import DataPaths, RunPaths
from stages.summarize.report import _script_of, compressed
from tests.support.hostile import hostile_text

HOSTILE = hostile_text()


@pytest.fixture(scope="module")
def problem_19(shared_scicode: Path) -> tuple[Problem, DataPaths]:
    data_paths = DataPaths(shared_scicode.parent)
    return problems_by_id(data_paths)["19"], data_paths


def noop() -> None:
    return None


def encodes(text: str) -> bool:
    text.encode("utf-8")
    return True


@given(HOSTILE, st.sampled_from(["stop", "length", None]))
def test_the_status_of_a_final_answer_is_total(answer: str, finish_reason: str | None) -> None:
    status, code = final_status(answer, finish_reason, "f")
    assert status in ("ok", "no_code", "truncated") and (code is None or code.strip())


@given(
    st.recursive(
        HOSTILE | st.integers(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(HOSTILE, inner, max_size=3),
        max_leaves=8,
    )
)
def test_a_model_response_cleaned_where_it_enters_can_always_be_written(value: object) -> None:
    assert encodes(json.dumps(valid_data(value), ensure_ascii=False))


@given(HOSTILE, HOSTILE, st.sampled_from(CARRY_MODES))
def test_the_test_script_of_hostile_code_is_built_and_keyed(problem_19, first: str, second: str, carry: Carry) -> None:
    problem, data_paths = problem_19
    codes: dict[str, str | None] = {"19.1": first, "19.2": second}
    record = {"status": "ok", "code": second, "raw_answer": second}
    step = GeneratedStep.from_record(freeze_object(record))
    generation = Generation.from_record(freeze_object({"steps": [record]}))
    verdict = verdict_before_running(problem.steps[1], generation, step)
    assert verdict is None or (verdict.status == "parse_error" and encodes(verdict.reason))
    if verdict is None:
        script = build_step_script(problem, 1, codes, data_paths, carry)
        key = verdict_key(script, None, {}, StepLimits("python", 1.0, None, "none (test)", 512))
        assert len(key) == 64
    parts, note = _script_of(problem, 1, codes, None, data_paths, carry)
    assert compressed(note + "".join(part.numbered for part in parts))  # what the report stores of it


@given(HOSTILE)
def test_the_code_of_a_recorded_tool_call_is_read_whatever_its_arguments(arguments: str) -> None:
    assert isinstance(_tool_code(arguments), str)
    assert isinstance(_tool_code(json.dumps({"code": arguments})), str)


@given(HOSTILE, HOSTILE)
@example("AssertionError: \ud800", "x\udfff")  # issue 20: a lone surrogate in an exception message failed the write
def test_a_verdict_with_hostile_output_is_cached_and_read_back(reason: str, output: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        cache = VerdictCache(Path(folder))
        key = "ab" + "0" * 62
        cache.put(key, StepVerdict("1.1", "fail", reason, 1, 0, 1, output, output, 0.5))
        cached = cache.get(key)
        assert cached is not None and cached.status == "fail" and encodes(cached.reason + cached.stdout)


@given(HOSTILE)
def test_a_failure_message_becomes_one_visible_line(message: str) -> None:
    try:
        raise ValueError(message)
    except ValueError as error:
        from doit.exceptions import TaskError

        fail = TaskError("PythonAction Error", error)
    for failure in (fail, TaskFailed(message)):
        note = describe_failure(Task("score:1", [noop]), failure)
        assert "\n" not in note.reason and "\x1b" not in note.reason and encodes(note.reason)


@given(HOSTILE, HOSTILE)
def test_a_failed_step_with_any_reason_is_published_and_printed_as_one_visible_line(reason: str, step: str) -> None:
    activity = Activity()
    activity.add_step_failure(StepFailure("1", 0, (step, "1.2"), "fail", reason))
    (failure,), unkept = activity.take_step_failures()
    line = step_failure_line(failure)
    assert unkept == 0 and "\n" not in line and "\x1b" not in line and encodes(line)
    assert len(line) <= 320


@given(HOSTILE)
def test_a_scoring_failure_with_any_message_is_recorded_and_read(message: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        paths = RunPaths(Path(folder))
        failure = not_scored.record(paths, "5", RuntimeError(message))
        found = not_scored.read(paths, "5")
        assert found is not None and found.line == failure.line and "\n" not in found.line


JSONISH = st.recursive(
    HOSTILE | st.integers() | st.floats() | st.booleans() | st.none(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HOSTILE, inner, max_size=4),
    max_leaves=12,
)
DESCRIPTION = st.fixed_dictionaries(
    {},
    optional={
        "type": JSONISH,
        "repr": JSONISH,
        "shape": st.lists(st.integers(), max_size=3) | JSONISH,
        "dtype": JSONISH,
        "size": st.integers() | JSONISH,
        "elements": st.lists(JSONISH, max_size=6) | JSONISH,
    },
)
COMPARED = st.fixed_dictionaries(
    {
        "test": st.integers(min_value=-1, max_value=3) | JSONISH,
        "values": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "name": JSONISH,
                    "description": DESCRIPTION | JSONISH,
                    "target": st.lists(st.integers(-2, 3) | HOSTILE, max_size=3) | JSONISH,
                },
            )
            | JSONISH,
            max_size=5,
        )
        | JSONISH,
    },
    optional={"statement": JSONISH, "uses_target": JSONISH},
)


@given(COMPARED | JSONISH, st.sampled_from([[np.arange(4.0)], [(1.0, [2, 3])], "no targets file", [{"k": 1}]]))
def test_a_compared_record_of_any_shape_becomes_a_bounded_view(compared: object, targets: object) -> None:
    from stages.summarize.report_values import compared_view

    view = compared_view(compared, "19.1", lambda step_id: targets)  # type: ignore[arg-type, return-value]
    if view is not None:
        for value in view.values:
            for side in (value.model, value.target):
                if side is not None:
                    assert len(side.repr) <= 200 and encodes(side.repr + side.type + (side.elements or ""))
        assert len(view.statement) <= 500 and encodes(view.statement)


@given(
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant", "tool", "system"]) | HOSTILE},
            optional={"content": JSONISH, "reasoning": JSONISH, "tool_calls": JSONISH, "tool_call_id": JSONISH},
        )
        | JSONISH,
        max_size=5,
    ),
    st.lists(st.fixed_dictionaries({}, optional={"error": JSONISH, "usage": JSONISH, "latency_s": JSONISH})),
)
def test_the_turns_of_any_recorded_trajectory_are_read(messages: list, calls: list) -> None:
    from stages.records.generation import _turns

    turns = _turns({"messages": messages, "calls": calls, "turns_recorded": True}, ())
    assert turns is not None
    for turn in turns:
        assert encodes(turn.role + (turn.text or "") + (turn.reasoning or "") + (turn.call or ""))
