"""Builders of schema-valid run artifacts (selection, details) for the tests of the stages that read them, and
whole summarized runs built from them (the run index's runs)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from stages.config.settings import Settings, load_settings
from stages.storage.artifacts import fingerprint, read_artifact, write_artifact
from stages.storage.json_values import JSONObject, JSONValue
from stages.storage.paths import ResultsPaths
from stages.summarize.stage import TargetsInfo, run_summarize

FIXED_NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
OFFICIAL = TargetsInfo("official", "data/scicode/test_data.h5")
DERIVED = TargetsInfo("derived", "data/scicode/derived_targets.h5")
ZERO_SHA = "0" * 64


# ---------------------------------------------------------------------------
# Builders of schema-valid run artifacts
# ---------------------------------------------------------------------------


def make_settings(tmp_path: Path, data_dir: Path | None = None, **overrides: str) -> Settings:
    words = {
        "model": "test-model",
        "split": "test",
        "results_dir": str(tmp_path / "results"),
        "data_dir": str(data_dir or tmp_path / "no-data"),
        **overrides,
    }
    return load_settings(words, cwd=tmp_path)


def selection_entry(
    problem_id: str,
    category: str,
    steps: int,
    scored: int,
    split: str = "test",
    problem_fingerprint: str | None = None,
    layout: Sequence[JSONValue] | None = None,
) -> dict[str, Any]:
    """A selection entry; its layout is the given one, else `<id>.1..<id>.<steps>` with the unscored steps last."""
    layout = layout or [
        {"step_id": f"{problem_id}.{index + 1}", "prefilled": index >= scored} for index in range(steps)
    ]
    return {
        "problem_id": problem_id,
        "category": category,
        "fingerprint": problem_fingerprint or fingerprint(problem_id),
        "split": split,
        "steps": steps,
        "scored_steps": scored,
        "layout": layout,
    }


def write_selection(settings: Settings, entries: Sequence[dict[str, Any]]) -> None:
    write_artifact(
        settings.run_paths.selection,
        "selection",
        {
            "fingerprint": fingerprint([e["problem_id"] for e in entries]),
            "status": "complete",
            "split": settings.split,
            "category": list(settings.category),
            "sample_ids": list(settings.sample_ids),
            "problems": list(entries),
        },
    )


def step_verdict(step_id: str, status: str) -> dict[str, Any]:
    passed = status == "pass"
    return {
        "step_id": step_id,
        "status": status,
        "correct": passed,
        "tests": {"total": 2, "passed": 2 if passed else 0},
        "returncode": {"pass": 0, "fail": 1, "skipped": None}.get(status, None),
        "stdout": "",
        "stderr": "",
        "duration_s": 0.25,
        "reason": "official prefilled step" if status == "skipped" else f"{status} reason",
    }


def write_details(
    settings: Settings,
    problem_id: str,
    category: str,
    steps: Sequence[tuple[str, str]],
    *,
    status: str = "complete",
    error: str | None = None,
    meta: dict[str, Any] | None = None,
    reasons: dict[str, str] | None = None,
) -> Path:
    verdicts = [step_verdict(step_id, verdict) for step_id, verdict in steps]
    for verdict in verdicts:
        verdict["reason"] = (reasons or {}).get(verdict["step_id"], verdict["reason"])
    scored = [v for v in verdicts if v["status"] != "skipped"]
    correct = status == "complete" and all(v["correct"] for v in scored)
    evaluation: JSONObject = {
        "problem_id": problem_id,
        "problem_correct": correct,
        "total_correct": sum(v["correct"] for v in scored),
        "total_steps": len(scored),
        "subproblem_correctness": [v["correct"] for v in scored],
        "steps": list(verdicts),
        "error": error,
    }
    attempt: JSONObject = {
        "final_answer": {"step_codes": {}},
        "artifacts": {"step_codes": {}},
        "trajectory": [],
        "correct": correct,
        "score": 1.0 if correct else 0.0,
        "meta": {"evaluation": evaluation, **(meta or {})},
    }
    path = settings.run_paths.details(problem_id)
    write_artifact(
        path,
        "details",
        {"fingerprint": ZERO_SHA, "status": status, "task_id": problem_id, "category": category, "attempts": [attempt]},
    )
    return path


def without_code_spans(html: str) -> str:
    return re.sub(r"<code>.*?</code>", "", html, flags=re.DOTALL)


# ---------------------------------------------------------------------------
# Summarized runs of one-step problems
# ---------------------------------------------------------------------------


USAGE = {"input_tokens": 200_000, "output_tokens": 50_000, "total_tokens": 250_000, "calls": 2}


def make_summarized_run(tmp_path: Path, model: str, passes: list[bool], **overrides: str) -> Settings:
    """A run of len(passes) one-step problems; problem i passes when passes[i]; each costs USAGE."""
    settings = make_settings(tmp_path, None, model=model, **overrides)
    ids = [f"P{n}" for n in range(1, len(passes) + 1)]
    write_selection(settings, [selection_entry(pid, "physics", 1, 1) for pid in ids])
    for pid, passed in zip(ids, passes):
        write_details(settings, pid, "physics", [(f"{pid}.1", "pass" if passed else "fail")], meta={"usage": USAGE})
    run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    return settings


PRICED = {"price_input_per_mtok": "2.5", "price_output_per_mtok": "10"}  # 0.2 M x 2.5 + 0.05 M x 10 = $1 a problem
CHEAP = {"price_input_per_mtok": "0.25", "price_output_per_mtok": "1"}  # $0.10 a problem


def make_whole_split_run(tmp_path: Path, model: str, **overrides: str) -> Settings:
    """A run of every problem of the test split (65 one-step problems, the first passing), no background."""
    return make_summarized_run(
        tmp_path, model, [True] + [False] * 64, split="test", with_background="false", **overrides
    )


@pytest.fixture
def results(tmp_path: Path) -> ResultsPaths:
    realistic = {"split": "test", "with_background": "false"}
    make_summarized_run(tmp_path, "strong", [True, True, True, False, False, False], **realistic, **PRICED)
    make_summarized_run(tmp_path, "cheap", [True, False, False, False, False, False], **realistic, **CHEAP)
    make_summarized_run(tmp_path, "wasteful", [True, False, False, False, False, False], **realistic, **PRICED)
    make_summarized_run(tmp_path, "tokens-only", [True, True, False, False, False], split="all")
    unsummarized = make_settings(tmp_path, model="pending", split="test")
    write_selection(unsummarized, [selection_entry("P1", "physics", 1, 1)])
    write_details(unsummarized, "P1", "physics", [("P1.1", "pass")])  # scored, not yet summarized
    stopped = make_settings(tmp_path, model="stopped", split="test")  # stopped in its preflight: nothing made
    write_selection(stopped, [selection_entry("P1", "physics", 1, 1)])
    return ResultsPaths(tmp_path / "results")


def read_record(path: Path, kind: str) -> dict[str, Any]:
    """The artifact at `path`, which must exist, parse and validate (where `read_artifact` would give None)."""
    record = read_artifact(path, kind)
    assert record is not None, f"no valid {kind} artifact at {path}"
    return record


def json_at(value: object, *keys: str | int) -> object:
    """The value at `keys` down nested JSON: a str key into an object that must hold it, an int index into an
    array that must be long enough."""
    for key in keys:
        if isinstance(key, str):
            assert isinstance(value, Mapping) and key in value, (key, value)
            value = value[key]
        else:
            assert isinstance(value, (list, tuple)) and -len(value) <= key < len(value), (key, value)
            value = value[key]
    return value


# Narrowing of JSON values read back (`JSONValue`) to the shape a test expects; a wrong shape fails the test.


def json_object(value: object) -> JSONObject:
    """`value`, which must be a JSON object."""
    assert isinstance(value, dict), value
    return value


def json_list(value: object) -> list[JSONValue]:
    """`value`, which must be a JSON array."""
    assert isinstance(value, list), value
    return value


def json_objects(value: object) -> list[JSONObject]:
    """`value`, which must be a JSON array of objects."""
    return [json_object(item) for item in json_list(value)]


def json_str(value: object) -> str:
    """`value`, which must be a JSON string."""
    assert isinstance(value, str), value
    return value


def json_int(value: object) -> int:
    """`value`, which must be a JSON integer (not a boolean)."""
    assert isinstance(value, int) and not isinstance(value, bool), value
    return value


def json_number(value: object) -> float:
    """`value`, which must be a JSON number (not a boolean)."""
    assert isinstance(value, (int, float)) and not isinstance(value, bool), value
    return value


def steps_of(record: object) -> list[JSONObject]:
    """The `steps` array of a record (a generation's, an evaluation's), each step an object."""
    return json_objects(json_at(record, "steps"))
