"""The typed reader of run results: records, the resolved rule, tool statistics, missing and foreign files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stages.records.generation import GeneratedStep, Generation
from stages.records.results import ResultsError, SelectionEntry, ToolStats, is_resolved, read_run
from stages.records.usage import Usage
from stages.storage.artifacts import fingerprint, write_artifact
from stages.storage.json_values import JSONValue, freeze_object
from stages.storage.paths import RunPaths

ZERO_SHA = "0" * 64


def test_resolved_rule() -> None:
    assert is_resolved(["pass", "pass", "skipped"], 2, True)
    assert not is_resolved(["pass", "pass"], 2, False)  # generation reported an error
    assert not is_resolved(["pass"], 2, True)  # a scored step has no verdict
    assert not is_resolved(["pass", "fail"], 2, True)
    assert not is_resolved([], 0, True)  # nothing scored is never resolved
    assert is_resolved(["pass", "pass", "pass"], 2, True)  # extra passing verdicts still resolve (as before)


def step_of(generation: Generation, step_id: str) -> GeneratedStep:
    """The generated step `step_id`, which the generation must hold."""
    step = generation.step(step_id)
    assert step is not None, step_id
    return step


def tool_step(step_id: str, results: list[tuple[str, str]]) -> dict[str, Any]:
    calls = [
        {
            "id": f"c{index}",
            "type": "function",
            "function": {"name": "code_interpreter", "arguments": json.dumps({"code": f"print({index})"})},
        }
        for index, _ in enumerate(results)
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"PROMPT OF {step_id}"},
        {"role": "assistant", "content": None, "tool_calls": calls},
    ]
    messages += [
        {"role": "tool", "tool_call_id": f"c{index}", "content": output} for index, (_, output) in enumerate(results)
    ]
    messages.append({"role": "assistant", "content": "```python\ndef f():\n    return 1\n```"})
    tool_results = [
        {
            "call_id": f"c{index}",
            "name": "code_interpreter",
            "status": status,
            "duration_s": 0.5,
            "truncated": False,
            "output": output,
        }
        for index, (status, output) in enumerate(results)
    ]
    return {
        "step_id": step_id,
        "prefilled": False,
        "status": "ok",
        "prompt_fingerprint": ZERO_SHA,
        "code": "def f():\n    return 1",
        "raw_answer": messages[-1]["content"],
        "error": None,
        "finish_reason": "stop",
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        "latency_s": 1.5,
        "trajectory": {
            "messages": messages,
            "calls": [{"latency_s": 0.7, "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}}] * 2,
            "tool_results": tool_results,
        },
    }


def write_run(run_dir: Path, *, details_for: dict[str, str]) -> RunPaths:
    """Problems A (details + generation), B (no details file), C (details of another task)."""
    paths = RunPaths(run_dir)
    entries: list[JSONValue] = [
        {
            "problem_id": pid,
            "category": "unclassified",
            "fingerprint": fingerprint(pid),
            "split": "test",
            "steps": 2,
            "scored_steps": 2,
            "layout": [{"step_id": f"{pid}.{n}", "prefilled": False} for n in (1, 2)],
        }
        for pid in ("A", "B", "C")
    ]
    write_artifact(
        paths.selection,
        "selection",
        {
            "fingerprint": ZERO_SHA,
            "status": "complete",
            "split": "test",
            "category": ["all"],
            "sample_ids": [],
            "problems": entries,
        },
    )
    write_artifact(
        paths.generation("A"),
        "generation",
        {
            "fingerprint": ZERO_SHA,
            "status": "complete",
            "problem_id": "A",
            "attempt": 0,
            "model": "m",
            "mode": "tool_use",
            "error": None,
            "usage": {"input_tokens": 20, "output_tokens": 10, "total_tokens": 30},
            "steps": [
                tool_step("A.1", [("ok", "0"), ("timeout", "killed")]),
                tool_step("A.2", [("sandbox_error", "down"), ("error", "Traceback"), ("weird", "?")]),
            ],
        },
    )
    for problem_id, task_id in details_for.items():
        verdicts: list[JSONValue] = [
            {
                "step_id": f"{problem_id}.{n}",
                "status": "pass",
                "correct": True,
                "tests": {"total": 1, "passed": 1},
                "returncode": 0,
                "stdout": "out",
                "stderr": "",
                "duration_s": 0.1,
                "reason": "",
            }
            for n in (1, 2)
        ]
        write_artifact(
            paths.details(problem_id),
            "details",
            {
                "fingerprint": ZERO_SHA,
                "status": "complete",
                "task_id": task_id,
                "category": "unclassified",
                "attempts": [
                    {
                        "final_answer": {"step_codes": {}},
                        "artifacts": {"step_codes": {}},
                        "trajectory": [],
                        "correct": True,
                        "score": 1.0,
                        "meta": {
                            "evaluation": {
                                "problem_id": task_id,
                                "problem_correct": True,
                                "total_correct": 2,
                                "total_steps": 2,
                                "subproblem_correctness": [True, True],
                                "steps": verdicts,
                                "error": None,
                            }
                        },
                    }
                ],
            },
        )
    return paths


def test_read_run_records(tmp_path: Path) -> None:
    write_run(tmp_path / "run", details_for={"A": "A", "C": "Z"})
    run = read_run(tmp_path / "run")
    a, b, c = run.problems
    assert a.state == "complete" and a.resolved() and a.details is not None
    assert [v.stdout for v in a.details.attempts[0].verdicts] == ["out", "out"]
    generation = a.generation(0)
    assert generation is not None and step_of(generation, "A.1").prompt == "PROMPT OF A.1"
    calls = step_of(generation, "A.2").tool_calls
    assert [(call.code, call.status, call.output) for call in calls] == [
        ("print(0)", "sandbox_error", "down"),
        ("print(1)", "error", "Traceback"),
        ("print(2)", "weird", "?"),
    ]
    assert step_of(generation, "A.1").tool_stats == ToolStats(calls=2, ok=1, timeout=1)
    assert run.tool_stats == ToolStats(calls=5, ok=1, error=1, timeout=1, sandbox_error=1, other=1)
    # usage: the details meta has none, so the generation's steps give it (calls counted from the trajectory)
    assert a.cost(0).usage == Usage(20, 10, 30, 4) and a.cost(0).latency_s == pytest.approx(3.0)
    assert (b.state, b.missing_reason, b.details_error) == (
        "missing_details",
        "no details file",
        "no details file: B.json",
    )
    assert (c.state, c.missing_reason, c.details_error) == (
        "invalid_details",
        "details of another problem",
        "C.json holds task_id Z",
    )
    assert not b.resolved() and not c.resolved() and b.is_error and c.is_error


def test_invalid_details_file(tmp_path: Path) -> None:
    paths = write_run(tmp_path / "run", details_for={})
    paths.details_dir.mkdir(parents=True, exist_ok=True)
    paths.details("B").write_text("{not json", encoding="utf-8")
    problem = read_run(tmp_path / "run").by_id["B"]
    assert (problem.state, problem.missing_reason) == ("invalid_details", "details file does not validate")


def test_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="run directory not found"):
        read_run(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultsError, match="missing .*selection.json"):
        read_run(tmp_path / "empty")


def test_selection_entry_categories() -> None:
    base = {
        "problem_id": "2",
        "split": "test",
        "fingerprint": ZERO_SHA,
        "steps": 3,
        "scored_steps": 3,
        "layout": [{"step_id": f"2.{n}", "prefilled": False} for n in (1, 2, 3)],
    }
    recorded = SelectionEntry.from_record(
        freeze_object({**base, "category": "Physics / Optics", "field": "Physics", "subfield": "Optics"})
    )
    assert (recorded.taxonomy.field, recorded.taxonomy.subfield) == ("Physics", "Optics")
    older = SelectionEntry.from_record(
        freeze_object({**base, "category": "unclassified"})
    )  # written before categories existed
    assert (older.taxonomy.field, older.taxonomy.subfield) == ("Physics", "Optics")
    named = SelectionEntry.from_record(freeze_object({**base, "category": "physics"}))
    assert (named.taxonomy.field, named.taxonomy.subfield) == ("unclassified", "physics")
