"""Scoring what a model server did to an answer: cut at the output limit (every affected step says "truncated"),
or never given because a prompt did not fit the server's context (the step and the later ones fail)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stages.benchmark.problems import problems_by_id
from stages.config.settings import load_settings
from stages.score.parent.stage import run_score
from stages.score.parent.truncation import truncation_note
from stages.storage.artifacts import write_artifact
from stages.targets import ResolvedTargets
from tests.score.score_helpers import reference_code, reference_codes, write_generation
from tests.support.run_artifacts import read_record


@pytest.fixture
def settings(staged_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    return load_settings(
        {"data_dir": str(staged_data_dir), "results_dir": str(tmp_path / "results"), "score_workers": "2"},
        cwd=tmp_path,
    )


@pytest.fixture
def dev_targets(shared_scicode: Path) -> ResolvedTargets:
    return ResolvedTargets("explicit", shared_scicode / "test_data_dev.h5", None, "validation targets")


def rewrite_steps(settings, problem_id: str, changes: dict[str, dict]) -> None:
    path = settings.run_paths.generation(problem_id)
    record = read_record(path, "generation")
    for step in record["steps"]:
        step.update(changes.get(step["step_id"], {}))
    write_artifact(path, "generation", record)


def verdicts(settings, problem_id: str) -> dict[str, tuple[str, str]]:
    details = read_record(settings.run_paths.details(problem_id), "details")
    return {s["step_id"]: (s["status"], s["reason"]) for s in details["attempts"][0]["meta"]["evaluation"]["steps"]}


def call(finish_reason: str) -> dict:
    return {
        "latency_s": 0.1,
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
        "finish_reason": finish_reason,
    }


def test_every_step_a_truncated_answer_affected_says_so_code_or_not(settings, dev_targets) -> None:
    problem = problems_by_id(settings.data_paths)["19"]
    codes = reference_codes(problem)
    reference = reference_code(problem, "19.1")
    cut = reference[: len(reference) // 2]  # an answer cut mid-function: code that does not compile
    write_generation(settings, problem, {"19.1": cut, "19.2": codes["19.2"]})
    rewrite_steps(
        settings,
        "19",
        {
            "19.1": {
                "status": "truncated",
                "finish_reason": "length",
                "trajectory": {"messages": [], "calls": [call("length")]},
            },
            # tool_use: a tool call cut mid-arguments, then a final answer that was not cut
            "19.2": {"trajectory": {"messages": [], "calls": [call("length"), call("stop")]}},
        },
    )
    run_score(settings, "19", dev_targets)
    found = verdicts(settings, "19")
    assert found["19.1"][0] == "fail"
    assert found["19.1"][1].startswith("truncated: the final answer was cut at the output limit (finish_reason=length")
    assert "Error" in found["19.1"][1]  # the test's own reason follows
    assert found["19.2"][1].startswith("truncated: 1 of 2 model answers were cut at the output limit")

    write_generation(settings, problem, {"19.1": None, "19.2": codes["19.2"]}, step_status={"19.1": "truncated"})
    rewrite_steps(settings, "19", {"19.1": {"finish_reason": "length"}})
    run_score(settings, "19", dev_targets)
    status, reason = verdicts(settings, "19")["19.1"]
    assert status == "parse_error" and reason.startswith("truncated: ") and "no code in the answer" in reason


def test_a_prompt_too_long_fails_its_step_and_the_later_ones_with_the_way_out(settings, dev_targets) -> None:
    problem = problems_by_id(settings.data_paths)["19"]
    codes = reference_codes(problem)
    write_generation(
        settings,
        problem,
        {"19.1": None, "19.2": None},
        step_status={"19.1": "context_exceeded", "19.2": "not_generated"},
    )
    way_out = (
        "the prompt of step 19.1 does not fit the server's context (HTTP 400 ...): give the server a larger context"
    )
    rewrite_steps(
        settings,
        "19",
        {"19.1": {"error": way_out}, "19.2": {"error": "not generated: the prompt of step 19.1 did not fit"}},
    )
    assert codes  # the reference exists; the model's answers never came
    summary = run_score(settings, "19", dev_targets)
    found = verdicts(settings, "19")
    assert found == {"19.1": ("fail", way_out), "19.2": ("fail", "not generated: the prompt of step 19.1 did not fit")}
    assert summary == {"problem_id": "19", "passed": 0, "scored": 2, "resolved": False}
    details = read_record(settings.run_paths.details("19"), "details")
    assert details["status"] == "complete"  # final outcomes, not a generation error to retry


def test_truncation_note_reads_any_record() -> None:
    assert truncation_note({}) is None
    assert truncation_note({"trajectory": {"calls": "not a list"}}) is None
    note = truncation_note({"trajectory": {"calls": [None, 3, {"finish_reason": "length"}]}})
    assert note is not None and note.startswith("truncated: 1 of 3")
    assert truncation_note({"status": "ok", "trajectory": {"calls": [{"finish_reason": "stop"}]}}) is None
