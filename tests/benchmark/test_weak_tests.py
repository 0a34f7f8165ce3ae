"""Known-weak official tests: the data file, re-verified with the real engine and the real targets, and the
flag beside a pass in summary.md and report.html."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from scripts.weak_tests_survey import score_answer, surveyed_steps, trivial_answers
from stages.benchmark.problems import Problem, load_split
from stages.benchmark.weak_tests import survey, weak_test, weak_tests
from stages.storage.paths import DataPaths


@pytest.fixture(scope="module")
def validation(shared_scicode: Path) -> dict[str, tuple[Problem, int]]:
    """step id -> (problem, index) of every surveyed validation step."""
    data_paths = DataPaths(shared_scicode.parent)
    return {
        problem.steps[index].step_id: (problem, index)
        for problem, index in surveyed_steps(load_split(data_paths, "validation"))
    }


def verdicts_of(step_id: str, validation: dict[str, tuple[Problem, int]], shared_scicode: Path) -> dict[str, str]:
    problem, index = validation[step_id]
    targets = shared_scicode / "test_data_dev.h5"
    return {
        answer.name: score_answer(problem, index, answer, DataPaths(shared_scicode.parent), targets).status
        for answer in trivial_answers(problem.steps[index])
    }


def test_the_data_file_says_how_it_was_made_and_covers_every_validation_step(
    validation: dict[str, tuple[Problem, int]], shared_scicode: Path
) -> None:
    record = survey()
    assert record["produced_by"].startswith("python -m scripts.weak_tests_survey")
    assert record["targets"]["sha256"] == hashlib.sha256((shared_scicode / "test_data_dev.h5").read_bytes()).hexdigest()
    assert record["surveyed"] == list(validation) and len(validation) == 50
    assert set(weak_tests()) <= set(validation)
    for entry in weak_tests().values():
        assert entry.passed_by and entry.reason.startswith("an answer returning")


def test_the_78_2_entry_holds_with_the_real_engine_and_targets(
    validation: dict[str, tuple[Problem, int]], shared_scicode: Path
) -> None:
    # an RK4 integrator that returns zeros of the trajectory's shape passes all three official tests
    entry = weak_test("78.2")
    assert entry is not None and "zeros" in entry.passed_by
    assert entry.reason == "an answer returning zeros of the output's shape passes all 3 official tests"
    verdicts = verdicts_of("78.2", validation, shared_scicode)
    assert [name for name, status in verdicts.items() if status == "pass"] == list(entry.passed_by)
    assert verdicts["constant:0"] == "fail" and verdicts["input:state"] == "fail"


def test_a_step_not_listed_fails_every_trivial_answer(
    validation: dict[str, tuple[Problem, int]], shared_scicode: Path
) -> None:
    assert weak_test("1.1") is None
    verdicts = verdicts_of("1.1", validation, shared_scicode)
    assert {"zeros", "constant:0", "constant:None"} <= set(verdicts) and len(verdicts) >= 8
    assert set(verdicts.values()) == {"fail"}
