"""Failed steps seen as they happen: real doit runs in a temp dir, a replay model with wrong answers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.pipeline_support import (
    NOTHING_TO_DO,
    assert_every_artifact_validates,
    data_args,
    looping_answer,
    output_of,
    reference_answer,
    run_doit,
    step_statuses,
    steps_of,
    wrong_answer,
)

PROBLEMS = ("1", "4", "38")
STEP_LINE = re.compile(
    r"^steps? (?P<ids>\S+(?:, \S+)*) (?P<status>fail|timeout|parse_error|eval_error): (?P<reason>.+)$"
)


def failed_step_lines(stderr: str) -> list[tuple[int, list[str], str]]:
    """(line index, step ids, status) of every failed-step line."""
    found = []
    for index, line in enumerate(stderr.splitlines()):
        matched = STEP_LINE.match(line)
        if matched:
            found.append((index, matched["ids"].split(", "), matched["status"]))
    return found


@pytest.mark.slow
def test_each_failed_step_is_printed_once_as_its_verdict_is_known(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    steps = steps_of(staged_data_dir, PROBLEMS, "validation")
    answers = {step_id: reference_answer(step) for step_id, step in steps.items()}
    answers["1.1"] = wrong_answer(steps["1.1"])
    answers["38.1"] = wrong_answer(steps["38.1"])  # fails at once (and 38.2, which calls it)
    answers["4.1"] = looping_answer(steps["4.1"])  # a timeout, seconds later
    replay = workdir / "answers.json"
    replay.write_text(json.dumps(answers), encoding="utf-8")
    args = (
        *data_args(staged_data_dir, dev_targets),
        f"model=replay:{replay}",
        "split=validation",
        f"sample_ids={','.join(PROBLEMS)}",
        "step_timeout_seconds=6",
    )
    result = run_doit(workdir, *args)
    print(result.stderr)
    assert result.returncode == 0, output_of(result)
    (run,) = (workdir / "results" / "scicode").glob("*/validation-tool_use-bg")
    assert_every_artifact_validates(run)
    statuses = step_statuses(run / "details")
    failed = {step_id for step_id, status in statuses.items() if status not in ("pass", "skipped")}
    assert {"1.1", "38.1", "4.1"} <= failed and statuses["4.1"] == "timeout"

    printed = failed_step_lines(result.stderr)
    printed_ids = [step_id for _, ids, _ in printed for step_id in ids]
    assert sorted(printed_ids) == sorted(failed)  # every failed step, once; no passing step
    assert all(statuses[step_id] == status for _, ids, status in printed for step_id in ids)
    where = {step_id: index for index, ids, _ in printed for step_id in ids}
    assert where["1.1"] < where["4.1"] and where["38.1"] < where["4.1"]  # each when known, not at the end
    lines = result.stderr.splitlines()
    finished = lines.index(next(line for line in lines if line.startswith("== run finished")))
    assert max(where.values()) < finished  # during the run, not in its recap
    assert "\r" not in result.stderr  # not a terminal: plain lines only
    assert any(line.startswith("progress: generated ") for line in lines)

    again = run_doit(workdir, *args)
    assert again.returncode == 0, output_of(again)
    assert NOTHING_TO_DO in again.stderr and failed_step_lines(again.stderr) == []  # printed once, not per run


def test_a_failing_step_the_model_never_answered_is_printed_as_not_generated() -> None:
    """The live line names a step as the counts do: `step 3.1 not_generated: ...`, not `fail`."""
    from stages.progress.activity import StepFailure
    from stages.progress.failures import step_failure_line
    from stages.records.generation import Generation
    from stages.records.verdict import StepVerdict
    from stages.score.parent.stage import counted_status
    from stages.storage.json_values import freeze_object

    def step(step_id: str, status: str) -> dict:
        return {"step_id": step_id, "prefilled": False, "status": status, "trajectory": {}, "usage": {}}

    generation = Generation.from_record(
        freeze_object(
            {"problem_id": "3", "steps": [step("3.1", "error"), step("3.2", "ok"), step("3.3", "not_generated")]}
        )
    )
    assert counted_status(StepVerdict("3.1", "fail", "not generated"), generation) == "not_generated"
    assert counted_status(StepVerdict("3.3", "fail", "not generated"), generation) == "not_generated"
    assert counted_status(StepVerdict("3.2", "fail", "wrong"), generation) == "fail"
    assert counted_status(StepVerdict("3.1", "timeout", "slow"), generation) == "timeout"
    line = step_failure_line(StepFailure("3", 0, ("3.1",), "not_generated", "the request failed"))
    assert line == "step 3.1 not_generated: the request failed"
