"""One problem never takes the others down: a score task that fails for any reason is recorded as "not scored",
the summary and the report are still written, and the run ends non-zero naming it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from doit.exceptions import TaskFailed

from stages.config.settings import load_settings
from stages.progress.activity import ACTIVITY
from stages.records.results import read_details
from stages.score import task
from stages.score.parent import stage as score_stage
from stages.storage.artifacts import read_artifact
from tests.support.pipeline_support import (
    TEST_API_KEY,
    ScriptedModel,
    assert_every_artifact_validates,
    assert_ok,
    data_args,
    load_json,
    model_args,
    output_of,
    run_dir,
    run_doit,
    step_statuses,
    steps_of,
)
from tests.support.run_artifacts import json_str
from tests.support.run_files import report_file, summary_file


def broken_scoring(settings, problem_id, targets=None):
    raise RuntimeError(f"a bug of ours while scoring {problem_id}")


def test_a_scoring_error_of_the_pipeline_is_recorded_by_its_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stages.score.parent.stage import ScoringError

    def refused(settings, problem_id, targets=None):
        raise ScoringError(f"problem {problem_id} is not in selection.json: run `doit select` first")

    settings = load_settings({"results_dir": str(tmp_path / "results"), "model": "m", "split": "all"}, cwd=tmp_path)
    monkeypatch.setattr(score_stage, "run_score", refused)
    monkeypatch.setattr(sys, "argv", ["dodo.py", "score:7"])
    outcome = task.score_and_count(settings, "7")
    assert isinstance(outcome, TaskFailed)
    assert outcome.message == "not scored: problem 7 is not in selection.json: run `doit select` first"


@pytest.mark.parametrize(("argv", "summarized"), [(["dodo.py"], True), (["dodo.py", "score:7"], False)])
def test_a_failed_scoring_is_recorded_and_fails_the_task_only_when_no_summary_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], summarized: bool
) -> None:
    settings = load_settings({"results_dir": str(tmp_path / "results"), "model": "m", "split": "all"}, cwd=tmp_path)
    stale = settings.run_paths.details("7")
    stale.parent.mkdir(parents=True)
    stale.write_text("{}", encoding="utf-8")  # the details of an earlier scoring: stale now
    monkeypatch.setattr(score_stage, "run_score", broken_scoring)
    monkeypatch.setattr(sys, "argv", argv)
    outcome = task.score_and_count(settings, "7")
    line = "not scored: RuntimeError: a bug of ours while scoring 7"
    assert (outcome is None) if summarized else (isinstance(outcome, TaskFailed) and outcome.message == line)
    assert not stale.exists()  # no details: the problem is scored again on the next run
    record = read_artifact(settings.run_paths.not_scored("7"), "not_scored")
    assert record is not None and record["reason"] == line.removeprefix("not scored: ")
    detail = json_str(record["detail"])
    assert "Traceback" in detail and "broken_scoring" in detail
    found = read_details(settings.run_paths, "7")
    assert (found.details, found.state, found.missing_reason) == (None, "missing_details", line)
    assert ACTIVITY.not_scored("7") == (line, record["detail"])


def test_an_interrupted_run_records_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from stages.execution.live_processes import RunInterrupted

    def interrupted(settings, problem_id, targets=None):
        raise RunInterrupted("stopping")

    settings = load_settings({"results_dir": str(tmp_path / "results"), "model": "m", "split": "all"}, cwd=tmp_path)
    monkeypatch.setattr(score_stage, "run_score", interrupted)
    with pytest.raises(RunInterrupted):
        task.score_and_count(settings, "8")
    assert not settings.run_paths.not_scored("8").exists()


PROBLEMS = ("1", "3", "4")


def test_a_problem_whose_scoring_fails_is_reported_and_the_others_are_summarized(
    workdir: Path, staged_data_dir: Path, dev_targets: Path, start_server
) -> None:
    # A real fault, no hook: a folder where problem 3's details file goes (its write raises IsADirectoryError,
    # an OSError the pipeline does not expect), in a real doit run.
    model = ScriptedModel(steps_of(staged_data_dir, PROBLEMS, "validation"))
    args = (
        *data_args(staged_data_dir, dev_targets),
        *model_args(start_server(model), mode="naive"),
        "split=validation",
        f"sample_ids={','.join(PROBLEMS)}",
    )
    run = run_dir(workdir, "acme-coder-1", "validation-naive-bg")
    blocker = run / "details" / "3.json"
    blocker.mkdir(parents=True)

    first = run_doit(workdir, *args, api_key=TEST_API_KEY)
    assert first.returncode == 1, output_of(first)
    assert "FAILED score:3: not scored: IsADirectoryError: [Errno 21] Is a directory" in first.stderr
    assert "FAILED summarize: 1 problem(s) not scored: 3 (not scored: IsADirectoryError" in first.stderr
    assert "---- score:3 ----" in first.stderr  # an unexpected error: its traceback at the end
    summary = load_json(summary_file(run, "json"))
    assert (summary["Total"], summary["Evaluated"], summary["Error"]) == (3, 3, 1)
    assert (summary["main_problem_resolved"], summary["subproblem_correct"], summary["subproblem_total"]) == (2, 2, 3)
    [failed] = summary["failed_problems"]
    assert failed["problem_id"] == "3" and failed["reason"].startswith("not scored: IsADirectoryError")
    assert "- 3 (invalid_details): `not scored: IsADirectoryError" in summary_file(run, "md").read_text()
    assert "not scored: IsADirectoryError" in report_file(run).read_text(encoding="utf-8")
    assert step_statuses(run / "details") == {"1.1": "pass", "4.1": "pass"}
    assert (run / "not_scored" / "3.json").is_file()

    blocker.rmdir()  # the fault is gone: the next run scores problem 3, and only it
    second = run_doit(workdir, *args, api_key=TEST_API_KEY)
    assert_ok(second)
    assert model.total() == 3  # no generation asked again
    assert step_statuses(run / "details") == {"1.1": "pass", "3.1": "pass", "4.1": "pass"}
    assert not (run / "not_scored" / "3.json").exists()
    assert load_json(summary_file(run, "json"))["failed_problems"] == []
    assert_every_artifact_validates(run)
