"""Streaming of the problem stages: generation order, admission of problems, doit threads, published activity."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from stages.config.command_line import CommandLine
from stages.config.settings import load_settings
from stages.generate.stage import problem_slots
from stages.pipeline.wiring import generation_admissions, problem_bound, problems_in_generation_order
from stages.progress.activity import Activity
from stages.score.parent.stage import expected_work, reference_seconds
from stages.select.stage import run_select, selected_problem_ids


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The verdict cache (measured durations) lives under the working folder: a fresh one per test."""
    monkeypatch.chdir(tmp_path)


def _settings(tmp_path: Path, data_dir: Path, **values: str):
    return load_settings({"data_dir": str(data_dir), "results_dir": str(tmp_path / "results"), **values}, cwd=tmp_path)


def test_the_slowest_to_score_first_then_turns_of_test_seconds_per_answer_and_answers(
    tmp_path: Path, staged_data_dir: Path
) -> None:
    settings = _settings(tmp_path, staged_data_dir)
    run_select(settings)
    order = problems_in_generation_order(settings)
    assert len(order) == 15
    # With no measured durations, the pinned reference durations decide: 51.4 is the slowest step.
    assert max(reference_seconds(), key=reference_seconds().__getitem__) == "51.4"
    assert order[0] == expected_work(settings, "51")
    assert order[0].answers == 4 and order[0].test_seconds > 80
    # Then 47 (~12 s of tests per answer), 7 (one answer, a 10 s test), 10 (eleven answers), 6 (one answer, a 6 s
    # test), 49 (the next most per answer), 70 (eight answers).
    assert [work.problem_id for work in order[1:7]] == ["47", "7", "10", "6", "49", "70"]
    assert sorted(work.problem_id for work in order) == sorted(selected_problem_ids(settings) or [])


def test_measured_durations_take_over_from_the_pins(tmp_path: Path, staged_data_dir: Path) -> None:
    settings = _settings(tmp_path, staged_data_dir, sample_ids="1,3,51")
    run_select(settings)
    cache = settings.state_paths.verdict_cache
    cache.mkdir(parents=True)
    (cache / "durations.json").write_text(json.dumps({"3.1": 300.0, "51.4": 2.0}), encoding="utf-8")
    assert [work.problem_id for work in problems_in_generation_order(settings)] == ["3", "51", "1"]


def test_admission_priorities_follow_the_generation_order_ties_included(tmp_path: Path, staged_data_dir: Path) -> None:
    settings = _settings(tmp_path, staged_data_dir, sample_ids="1,19,29,38")
    run_select(settings)
    cache = settings.state_paths.verdict_cache
    cache.mkdir(parents=True)
    (cache / "durations.json").write_text(json.dumps({"1.1": 100.0}), encoding="utf-8")
    order = problems_in_generation_order(settings)
    assert [work.test_seconds for work in order] == [100.0, 3.0, 3.0, 2.0]  # 29 and 38 tie: selection order
    admissions = generation_admissions(settings)
    assert [problem_id for problem_id, _ in admissions] == ["1", "29", "38", "19"]
    priorities = [priority for _, priority in admissions]
    assert priorities == sorted(set(priorities), reverse=True)  # distinct: no tie left to the threads' race


def test_waiting_problems_are_admitted_highest_priority_first(tmp_path: Path, staged_data_dir: Path) -> None:
    slots = problem_slots(_settings(tmp_path, staged_data_dir, concurrency="1"))
    admitted: list[float] = []

    def generate(priority: float) -> None:
        with slots.slot(priority):
            admitted.append(priority)

    with slots.slot(1000.0):  # one problem is being generated; three wait
        threads = [threading.Thread(target=generate, args=(priority,)) for priority in (1.0, 40.0, 7.0)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while len(slots._waiting) < 3:
            assert time.monotonic() < deadline, "the problems never waited for a slot"
            time.sleep(0.01)
        assert admitted == []
    for thread in threads:
        thread.join(timeout=10)
    assert admitted == [40.0, 7.0, 1.0]
    assert slots.peak == 1


def test_problems_started_together_are_admitted_in_priority_order(tmp_path: Path, staged_data_dir: Path) -> None:
    """No waiting holder here: the first arrival would take the free slot at once without the settling time."""
    slots = problem_slots(_settings(tmp_path, staged_data_dir, concurrency="1"))
    assert slots.settle_s > 0
    admitted: list[float] = []

    def generate(priority: float) -> None:
        with slots.slot(priority):
            admitted.append(priority)

    threads = [threading.Thread(target=generate, args=(priority,)) for priority in (1.0, 40.0, 7.0, 90.0)]
    for thread in threads:  # lowest priority first, each a little later than the one before
        thread.start()
        time.sleep(slots.settle_s / 10)
    for thread in threads:
        thread.join(timeout=10)
    assert admitted == [90.0, 40.0, 7.0, 1.0]


def test_one_doit_thread_per_problem_the_run_can_select(tmp_path: Path, staged_data_dir: Path) -> None:
    assert problem_bound(_settings(tmp_path, staged_data_dir)) == 15
    assert problem_bound(_settings(tmp_path, staged_data_dir, model="m")) == 80
    assert problem_bound(_settings(tmp_path, staged_data_dir, model="m", split="test")) == 65
    assert problem_bound(_settings(tmp_path, staged_data_dir, sample_ids="1,3")) == 2


@pytest.mark.parametrize(
    ("argv", "executes"),
    [
        ([], True),
        (["run"], True),
        (["score:10", "model=m"], True),
        (["-n", "4", "generate"], True),
        (["list", "--all"], False),
        (["info", "score:10"], False),
        (["forget"], False),
        (["clean"], False),
    ],
)
def test_commands_that_run_tasks(argv: list[str], executes: bool) -> None:
    assert CommandLine.parse(argv).executes_tasks is executes


def test_activity_gauges_and_tallies_from_threads() -> None:
    activity = Activity()
    release = threading.Event()
    entered = threading.Barrier(7)

    def call() -> None:
        with activity.busy("model_calls"):
            entered.wait()
            release.wait()

    threads = [threading.Thread(target=call) for _ in range(6)]
    for thread in threads:
        thread.start()
    entered.wait()
    with activity.busy("test_processes"):
        snapshot = activity.snapshot()
    assert (snapshot.model_calls, snapshot.test_processes) == (6, 1)
    release.set()
    for thread in threads:
        thread.join()
    activity.set_problems(15)
    activity.add_scored("1", 1, 1)
    activity.add_scored("3", 0, 2)
    activity.add_scored("3", 2, 2)  # rescored: replaces its earlier figures
    snapshot = activity.snapshot()
    assert (snapshot.model_calls, snapshot.test_processes, snapshot.problems) == (0, 0, 15)
    assert (snapshot.steps_passed, snapshot.steps_scored, snapshot.pass_rate) == (3, 3, 1.0)
