"""Grading in several environments (`environments=NAME:PYTHON,...`): a step passes when any environment passes it.

The 2024-era environment is SciCode-Verified's (numpy 1.26.4, ...), built once by the project's own builder
(tests/conftest.py: `era2024_python`); "current" is this interpreter (numpy 2). An answer that uses `np.product`
(removed in numpy 2) passes in the first and fails in the second.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from stages.benchmark.problems import load_split, problems_by_id
from stages.config.settings import load_settings
from stages.records.details import Details
from stages.score.parent import stage
from stages.score.parent.stage import run_score, score_fingerprint_parts
from stages.storage.artifacts import read_artifact
from stages.storage.json_values import freeze_object
from stages.targets import ResolvedTargets
from tests.score.score_helpers import reference_codes, write_generation
from tests.support.run_artifacts import json_at, json_object

# 29.2 as a model may write it: np.product, an alias of np.prod that numpy 2 removed (29.3 calls it too).
NUMPY1_INNER_PRODUCT = '''def inner_product(u, v):
    """Inner product of two vectors, as the product of their stacked components summed."""
    p = np.sum(np.product(np.stack([u, v]), axis=0))
    return p
'''
pytestmark = [pytest.mark.slow, pytest.mark.network]  # the 2024-era venv comes from the package index once


@pytest.fixture
def dev_targets(shared_scicode: Path) -> ResolvedTargets:
    return ResolvedTargets("explicit", shared_scicode / "test_data_dev.h5", None, "validation targets")


@pytest.fixture
def make_settings(staged_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)  # the verdict cache lives under the working directory

    def build(**values: str):
        base = {"data_dir": str(staged_data_dir), "results_dir": str(tmp_path / "results"), "score_workers": "2"}
        return load_settings({**base, "step_timeout_seconds": "300", **values}, cwd=tmp_path)

    return build


def both(era2024_python: Path, first: str = "2024-era") -> str:
    pairs = {"2024-era": f"2024-era:{era2024_python}", "current": f"current:{sys.executable}"}
    return ",".join([pairs[first], *(pair for name, pair in pairs.items() if name != first)])


def steps_of(settings, problem_id: str) -> dict[str, dict[str, Any]]:
    details = read_artifact(settings.run_paths.details(problem_id), "details")
    assert details is not None
    steps: list[dict[str, Any]] = json_object(json_at(details, "attempts", 0, "meta", "evaluation"))["steps"]  # type: ignore[assignment]
    return {str(step["step_id"]): step for step in steps}


def environment_statuses(step: dict) -> dict[str, str]:
    return {entry["name"]: entry["status"] for entry in step.get("environments", [])}


def write_numpy1_answer(settings) -> None:
    prob = problems_by_id(settings.data_paths)["29"]
    write_generation(settings, prob, {**reference_codes(prob), "29.2": NUMPY1_INNER_PRODUCT})


def executions() -> int:
    return stage.EXECUTIONS["count"]


def test_a_numpy1_answer_passes_in_the_2024_era_fails_in_the_current_one_and_passes_under_or(
    make_settings, era2024_python: Path, dev_targets
) -> None:
    current = make_settings(environments=f"current:{sys.executable}")
    write_numpy1_answer(current)
    assert run_score(current, "29", dev_targets)["passed"] == 1
    steps = steps_of(current, "29")
    assert [steps[s]["status"] for s in ("29.1", "29.2", "29.3")] == ["pass", "fail", "fail"]
    assert "product" in steps["29.2"]["reason"] + steps["29.2"]["stderr"]
    assert environment_statuses(steps["29.2"]) == {"current": "fail"}

    era = make_settings(environments=f"2024-era:{era2024_python}")
    assert run_score(era, "29", dev_targets)["resolved"] is True
    assert environment_statuses(steps_of(era, "29")["29.2"]) == {"2024-era": "pass"}

    # OR, every verdict recorded: both environments' verdicts of each step.
    every = make_settings(environments=both(era2024_python, first="current"), all_environments="true")
    before = executions()
    summary = run_score(every, "29", dev_targets)
    assert summary == {"problem_id": "29", "passed": 3, "scored": 3, "resolved": True}
    assert executions() == before  # every verdict of both environments was cached by the two runs above
    steps = steps_of(every, "29")
    assert environment_statuses(steps["29.1"]) == {"current": "pass", "2024-era": "pass"}
    assert environment_statuses(steps["29.2"]) == {"current": "fail", "2024-era": "pass"}
    assert steps["29.2"]["status"] == "pass" and steps["29.2"]["correct"] is True
    assert [entry["name"] for entry in steps["29.2"]["environments"]] == ["current", "2024-era"]  # as named
    record = read_artifact(every.run_paths.details("29"), "details")
    assert record is not None
    read_back = Details.from_record(freeze_object(record)).attempts[0].evaluation.steps[1]
    assert [(e.name, e.status) for e in read_back.environments] == [("current", "fail"), ("2024-era", "pass")]


def test_the_first_pass_ends_a_step_and_adding_an_environment_regrades_only_the_steps_not_passed(
    make_settings, era2024_python: Path, dev_targets
) -> None:
    current = make_settings(environments=f"current:{sys.executable}")
    write_numpy1_answer(current)
    before = executions()
    run_score(current, "29", dev_targets)
    assert executions() - before == 3

    # The 2024-era environment added first: the cached passes decide 29.1, only 29.2 and 29.3 run in it.
    added = make_settings(environments=both(era2024_python))
    before = executions()
    assert run_score(added, "29", dev_targets)["resolved"] is True
    assert executions() - before == 2
    steps = steps_of(added, "29")
    assert environment_statuses(steps["29.1"]) == {"current": "pass"}  # never run in the 2024-era one
    assert environment_statuses(steps["29.2"]) == {"2024-era": "pass", "current": "fail"}

    # Short-circuit on a fresh cache: a pass in the first environment ends the step.
    fresh = make_settings(environments=both(era2024_python), results_dir=str(Path.cwd() / "fresh"))
    (Path.cwd() / ".scicode").rename(Path.cwd() / "old-state")
    write_numpy1_answer(fresh)
    before = executions()
    run_score(fresh, "29", dev_targets)
    assert executions() - before == 3  # each step passed in the 2024-era environment; "current" never ran
    assert {sid: environment_statuses(step) for sid, step in steps_of(fresh, "29").items()} == {
        sid: {"2024-era": "pass"} for sid in ("29.1", "29.2", "29.3")
    }


def test_environments_enter_the_score_fingerprint_by_their_libraries(make_settings, era2024_python: Path) -> None:
    one = make_settings(environments=f"current:{sys.executable}")
    two = make_settings(environments=both(era2024_python))
    plain = make_settings()
    parts = {name: score_fingerprint_parts(settings, "29") for name, settings in (("one", one), ("two", two))}
    assert parts["one"].value != parts["two"].value != score_fingerprint_parts(plain, "29").value
    libraries = parts["two"].libraries
    assert libraries["2024-era numpy"] == "1.26.4" and str(libraries["current numpy"]).startswith("2.")
    assert parts["two"].settings["environments"] == both(era2024_python)


def test_all_validation_reference_steps_pass_in_both_environments(
    validation_reference_scoring, era2024_python: Path, dev_targets, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the working folder of the session's reference scoring (tests/conftest.py), whose verdict cache already
    holds this interpreter's verdicts of the 50 steps: only the 2024-era environment's test processes run."""
    reference = validation_reference_scoring("full").settings
    workdir = Path(reference.results_dir).parent
    monkeypatch.chdir(workdir)
    settings = load_settings(
        {
            "data_dir": reference.data_dir,
            "results_dir": str(workdir / "results-environments"),
            "score_workers": "2",
            "step_timeout_seconds": "900",
            "environments": both(era2024_python),
            "all_environments": "true",
        },
        cwd=workdir,
    )
    problems = load_split(settings.data_paths, "validation")
    for prob in problems:
        write_generation(settings, prob, reference_codes(prob))
    before = executions()
    with ThreadPoolExecutor(max_workers=4) as pool:  # as the validation reference fixture scores them
        summaries = list(pool.map(lambda prob: run_score(settings, prob.problem_id, dev_targets), problems))
    assert sum(s["passed"] for s in summaries) == 50 == sum(s["scored"] for s in summaries)
    assert executions() - before == 50  # the 2024-era environment's; this interpreter's came from the cache
    verdicts = {
        sid: environment_statuses(step)
        for prob in problems
        for sid, step in steps_of(settings, prob.problem_id).items()
        if step["status"] != "skipped"
    }
    assert len(verdicts) == 50
    assert {sid: v for sid, v in verdicts.items() if v != {"2024-era": "pass", "current": "pass"}} == {}


def test_dask_scoring_grades_in_the_same_environments(make_settings, era2024_python: Path, dev_targets) -> None:
    from stages.score.parent.dask_executor import close_dask_executors

    settings = make_settings(
        environments=both(era2024_python, first="current"), all_environments="true", executor="dask"
    )
    write_numpy1_answer(settings)
    try:
        summary = run_score(settings, "29", dev_targets)
    finally:
        close_dask_executors()
    assert summary == {"problem_id": "29", "passed": 3, "scored": 3, "resolved": True}
    steps = steps_of(settings, "29")
    assert environment_statuses(steps["29.2"]) == {"current": "fail", "2024-era": "pass"}
    assert all(step["executed_on"].startswith("tcp://127.0.0.1:") for step in steps.values())  # on the workers
