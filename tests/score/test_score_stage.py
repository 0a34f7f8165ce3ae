"""The score stage end to end: details files, verdict cache, generation errors, missing targets,
prefilled steps, and (slow) all 50 validation reference steps through `run_score`."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stages.benchmark.problems import load_split, problems_by_id
from stages.config.settings import load_settings
from stages.progress.activity import Activity, StepFailure
from stages.records.generation import read_generation_file
from stages.records.verdict import StepVerdict
from stages.score.parent import cache as cache_module
from stages.score.parent import executor as executor_module
from stages.score.parent import stage
from stages.score.parent.request import StepRequest
from stages.score.parent.stage import run_score, score_fingerprint
from stages.storage.artifacts import is_current, read_artifact
from stages.targets import ResolvedTargets
from tests.score.score_helpers import reference_code, reference_codes, write_generation
from tests.support.run_artifacts import json_at, json_object


@pytest.fixture
def make_settings(staged_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)

    def build(**values: str):
        return load_settings(
            {
                "data_dir": str(staged_data_dir),
                "results_dir": str(tmp_path / "results"),
                "score_workers": "2",
                "step_timeout_seconds": "120",
                **values,
            },
            cwd=tmp_path,
        )

    return build


@pytest.fixture
def settings(make_settings):
    return make_settings()


@pytest.fixture
def dev_targets(shared_scicode: Path) -> ResolvedTargets:
    return ResolvedTargets("explicit", shared_scicode / "test_data_dev.h5", None, "validation targets")


def executions() -> int:
    return stage.EXECUTIONS["count"]


def evaluation_of(settings, problem_id: str) -> dict:
    details = read_artifact(settings.run_paths.details(problem_id), "details")
    assert details is not None
    return json_object(json_at(details, "attempts", 0, "meta", "evaluation")) | {"_details": details}


def test_reference_problem_passes_and_cache_reruns_only_changed_scripts(settings, dev_targets) -> None:
    prob = problems_by_id(settings.data_paths)["19"]
    codes = reference_codes(prob)
    write_generation(settings, prob, codes)
    before = executions()
    summary = run_score(settings, "19", dev_targets)
    assert summary == {"problem_id": "19", "passed": 2, "scored": 2, "resolved": True}
    assert executions() - before == 2
    evaluation = evaluation_of(settings, "19")
    details = evaluation["_details"]
    assert details["status"] == "complete" and details["attempts"][0]["correct"] is True
    assert [s["status"] for s in evaluation["steps"]] == ["pass", "pass"]
    assert evaluation["subproblem_correctness"] == [True, True]
    assert is_current(settings.run_paths.details("19"), "details", score_fingerprint(settings, "19", dev_targets))

    before = executions()
    run_score(settings, "19", dev_targets)
    assert executions() == before, "rescoring unchanged generations must not start a test process"
    assert all(s["cached"] for s in evaluation_of(settings, "19")["steps"])

    write_generation(settings, prob, codes | {"19.2": reference_code(prob, "19.2") + "\n# regenerated\n"})
    fingerprint_before = score_fingerprint(settings, "19", dev_targets)
    assert not is_current(settings.run_paths.details("19"), "details", fingerprint_before)
    before = executions()
    run_score(settings, "19", dev_targets)
    assert executions() - before == 1, "only the regenerated step's script changed"

    write_generation(settings, prob, codes | {"19.1": reference_code(prob, "19.1").replace("return M", "return -M")})
    before = executions()
    summary = run_score(settings, "19", dev_targets)
    assert executions() - before == 2
    assert summary["resolved"] is False


# What the verdict sources hashed to in the version before every verdict was decided in verdict_rules.py (the parent
# side built its own then): the part of the cache key that a verdict cache written by that version holds.
VERDICT_SOURCES_BEFORE_ONE_ROOM = "3c954d371057f72bb374ef5639a20899f42d11cbe106bbbb08592b3879af6ea2"


def test_verdicts_cached_before_every_verdict_was_decided_in_the_rules_are_scored_again(
    settings, dev_targets, monkeypatch
) -> None:
    """The upgrade note's promise: the cache of the version before is not reused (its verdict differs here, so
    reuse would show), nothing crashes, and the steps run again once; the new verdicts are then cached."""
    prob = problems_by_id(settings.data_paths)["19"]
    write_generation(settings, prob, reference_codes(prob))
    generation = read_generation_file(settings.run_paths.generation("19"))
    environments = stage.scoring_environments(settings)
    with monkeypatch.context() as before:
        before.setattr(cache_module, "verdict_sources_hash", lambda: VERDICT_SOURCES_BEFORE_ONE_ROOM)
        planned = stage.plan_steps(settings, prob, generation, dev_targets, environments)
    old_cache = cache_module.cache_at(settings.state_paths.verdict_cache)
    for item in planned:
        old_cache.put(item.keys[0], StepVerdict(item.step.step_id, "fail", "cached before the upgrade", tests_total=1))
    assert cache_module.verdict_sources_hash() != VERDICT_SOURCES_BEFORE_ONE_ROOM

    started = executions()
    summary = run_score(settings, "19", dev_targets)
    steps = evaluation_of(settings, "19")["steps"]
    assert executions() - started == 2, "every step cached by the version before runs again"
    assert summary["resolved"] is True
    assert [(s["status"], s["cached"]) for s in steps] == [("pass", False), ("pass", False)]
    assert all(old_cache.get(item.keys[0]) is not None for item in planned)  # left as it was, unused

    started = executions()
    run_score(settings, "19", dev_targets)
    assert executions() == started and all(s["cached"] for s in evaluation_of(settings, "19")["steps"])


def test_generation_error_and_missing_steps(settings, dev_targets) -> None:
    prob = problems_by_id(settings.data_paths)["19"]
    write_generation(
        settings, prob, reference_codes(prob), status="error", error="API error 500 after retries", stop_after=1
    )
    run_score(settings, "19", dev_targets)
    evaluation = evaluation_of(settings, "19")
    details = evaluation["_details"]
    assert details["status"] == "generation_error" and details["attempts"][0]["correct"] is False
    first, second = evaluation["steps"]
    assert first["status"] == "pass"
    assert second["status"] == "fail" and second["reason"] == "not generated: API error 500 after retries"
    assert evaluation["error"] == "API error 500 after retries"


def test_no_code_is_parse_error(settings, dev_targets) -> None:
    prob = problems_by_id(settings.data_paths)["19"]
    write_generation(settings, prob, reference_codes(prob) | {"19.2": None}, step_status={"19.2": "no_code"})
    run_score(settings, "19", dev_targets)
    statuses = [(s["status"], s["reason"]) for s in evaluation_of(settings, "19")["steps"]]
    assert statuses[0][0] == "pass"
    assert statuses[1][0] == "parse_error" and "no code" in statuses[1][1]


def test_blank_code_recorded_as_ok_is_parse_error_not_a_run_test(settings, dev_targets) -> None:
    # issue 21: generations written before blank extractions became no_code hold code "" with status ok
    prob = problems_by_id(settings.data_paths)["19"]
    write_generation(settings, prob, reference_codes(prob) | {"19.2": "\n  \n"})
    before = executions()
    run_score(settings, "19", dev_targets)
    steps = evaluation_of(settings, "19")["steps"]
    assert [s["status"] for s in steps] == ["pass", "parse_error"]
    assert steps[1]["reason"].startswith("no code in the answer (no_code)") and not steps[1]["stderr"]
    assert executions() - before == 1  # only 19.1 ran


def test_missing_targets_are_eval_errors(settings, dev_targets) -> None:
    prob = problems_by_id(settings.data_paths)["19"]
    write_generation(settings, prob, reference_codes(prob))
    run_score(settings, "19", ResolvedTargets("missing", None, None, "official targets not downloaded"))
    steps = evaluation_of(settings, "19")["steps"]
    assert [s["status"] for s in steps] == ["eval_error", "eval_error"]
    assert "official targets not downloaded" in steps[0]["reason"]


def test_prefilled_step_is_skipped_and_missing_groups_are_eval_errors(settings, dev_targets) -> None:
    prob = problems_by_id(settings.data_paths)["13"]
    codes = {step.step_id: "def placeholder():\n    return 0\n" for step in prob.steps if not step.prefilled}
    write_generation(settings, prob, codes)
    run_score(settings, "13", dev_targets)
    evaluation = evaluation_of(settings, "13")
    by_id = {s["step_id"]: s for s in evaluation["steps"]}
    assert by_id["13.6"]["status"] == "skipped" and by_id["13.6"]["reason"] == "official prefilled step"
    assert evaluation["total_steps"] == len(prob.steps) - 1
    assert all(
        s["status"] == "eval_error" and "missing from" in s["reason"] for sid, s in by_id.items() if sid != "13.6"
    )


HELPER_TENSOR = """
def _kron_all(factors):
    M = 1
    for factor in factors:
        M = np.kron(M, factor)
    return M


def tensor(*args):
    return _kron_all(args)
"""


@pytest.mark.parametrize("carry", ["full", "definition"])
def test_a_top_level_helper_of_an_earlier_step_reaches_later_steps_only_under_carry_full(
    make_settings, dev_targets, carry
) -> None:
    settings = make_settings(carry=carry)
    prob = problems_by_id(settings.data_paths)["19"]
    write_generation(settings, prob, reference_codes(prob) | {"19.1": HELPER_TENSOR})
    run_score(settings, "19", dev_targets)
    first, second = evaluation_of(settings, "19")["steps"]
    assert first["status"] == "pass", first["reason"]
    if carry == "full":
        assert second["status"] == "pass", (second["reason"], second["stderr"][-1500:])
    else:  # only `tensor` is carried: the helper it calls is missing in step 19.2's script
        assert second["status"] == "fail"
        assert "NameError" in second["reason"] + second["stderr"] and "_kron_all" in second["reason"] + second["stderr"]


def test_carry_is_part_of_the_score_fingerprint(make_settings, dev_targets) -> None:
    full, definition = make_settings(carry="full"), make_settings(carry="definition")
    assert full.run_paths.run_dir != definition.run_paths.run_dir
    prob = problems_by_id(full.data_paths)["19"]
    for settings in (full, definition):
        write_generation(settings, prob, reference_codes(prob))
    assert score_fingerprint(full, "19", dev_targets) != score_fingerprint(definition, "19", dev_targets)


@pytest.mark.slow
@pytest.mark.parametrize("carry", ["full", "definition"])
def test_all_validation_reference_steps_pass_through_run_score(validation_reference_scoring, carry) -> None:
    scoring = validation_reference_scoring(carry)
    problems = load_split(scoring.settings.data_paths, "validation")
    failures = [
        (s["step_id"], s["status"], s["reason"])
        for p in problems
        for s in evaluation_of(scoring.settings, p.problem_id)["steps"]
        if s["status"] != "pass"
    ]
    assert failures == []
    assert sum(s["passed"] for s in scoring.summaries) == 50 and sum(s["scored"] for s in scoring.summaries) == 50
    assert sum(s["resolved"] for s in scoring.summaries) == 15
    assert scoring.executions > 0  # the first mode scored runs every step; the second, every script it builds anew


def test_steps_wait_with_their_problems_slowest_step(settings, dev_targets, monkeypatch) -> None:
    """What the score stage asks of the executor: every step of 47 carries 47.4's pinned seconds, so the
    problem's quick steps go first and its details are written as soon as 47.4 ends."""
    prob = problems_by_id(settings.data_paths)["47"]
    write_generation(settings, prob, reference_codes(prob))
    requests: list[StepRequest] = []

    class Recording:
        name = "local"

        def run(self, request: StepRequest) -> StepVerdict:
            requests.append(request)
            return StepVerdict(request.step_id, "fail", "recorded, not run", tests_total=1)

    monkeypatch.setattr(executor_module, "executor_for", lambda _settings: Recording())
    run_score(settings, "47", dev_targets)
    slowest = stage.reference_seconds()["47.4"]
    priorities = {request.step_id: request.priority for request in requests}
    assert priorities == {
        "47.1": (slowest, -1.0),
        "47.2": (slowest, -1.0),
        "47.3": (slowest, -1.0),
        "47.4": (slowest, -slowest),
    }


def _returning_none(step) -> str:
    indent = "    "
    return f"{step.function_header.rstrip()}\n{indent}return None\n"


def _looping(step) -> str:
    return f"{step.function_header.rstrip()}\n    while True:\n        pass\n"


def test_a_failed_step_is_published_while_the_problems_other_steps_still_run(
    make_settings, dev_targets, monkeypatch
) -> None:
    """19.1 returns None (fails at once), 19.2 loops (a timeout, seconds later): 19.1's failure reaches the live
    view before the problem's scoring ends."""
    settings = make_settings(step_timeout_seconds="8")
    activity = Activity()
    monkeypatch.setattr(stage, "ACTIVITY", activity)
    prob = problems_by_id(settings.data_paths)["19"]
    first, second = prob.steps
    write_generation(settings, prob, {first.step_id: _returning_none(first), second.step_id: _looping(second)})
    with ThreadPoolExecutor(max_workers=1) as pool:
        scoring = pool.submit(run_score, settings, "19", dev_targets)
        deadline = time.monotonic() + 60
        published: list[StepFailure] = []
        while not published and time.monotonic() < deadline and not scoring.done():
            published, _ = activity.take_step_failures()
            time.sleep(0.05)
        running_when_published = not scoring.done()
        scoring.result()
    assert [(f.step_ids, f.status) for f in published] == [(("19.1",), "fail")]
    assert running_when_published  # 19.2 was still running
    later, unkept = activity.take_step_failures()
    assert [(f.problem_id, f.attempt, f.step_ids, f.status) for f in later] == [("19", 0, ("19.2",), "timeout")]
    assert unkept == 0 and "step_timeout_seconds=8" in later[0].reason


def test_steps_a_generation_error_left_unanswered_are_published_at_once_as_one(
    settings, dev_targets, monkeypatch
) -> None:
    activity = Activity()
    monkeypatch.setattr(stage, "ACTIVITY", activity)
    prob = problems_by_id(settings.data_paths)["47"]
    write_generation(settings, prob, reference_codes(prob), status="error", error="HTTP 500", stop_after=1)
    run_score(settings, "47", dev_targets)
    published, _ = activity.take_step_failures()
    assert [(f.step_ids, f.status, f.reason) for f in published] == [
        (("47.2", "47.3", "47.4"), "fail", "not generated: HTTP 500")
    ]
    run_score(settings, "47", dev_targets)  # scored again in the same process: already printed
    assert activity.take_step_failures() == ([], 0)
