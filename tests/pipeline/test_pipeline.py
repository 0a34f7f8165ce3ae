"""Whole-pipeline acceptance tests: real `doit` subprocesses in temp folders against local model servers.

Every test runs the real dodo.py (download from staged files, select, generate through the `openai`
client, isolated scoring, summary) in its own working folder, so doit's database, the verdict cache
and the results are fresh. Most tests pass the official-layout validation targets explicitly
(`h5py_file=`, a temp copy of ../shared/scicode/test_data_dev.h5); the embedded-default test is the
one that derives the targets from the reference code, as a fresh clone does.

A "real" model is a `ModelServer` in this process: it never gets the step header the built-in models
get, so it recognizes the step it is asked from the prompt text (the next-step block ends with that
step's function header and return line).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import pytest

from stages.benchmark.problems import Step, load_problems
from stages.exit_codes import MODEL_NOT_SERVED
from stages.generate.builtin import LATENCY_VARIABLE
from stages.generate.server import ErrorReply, ModelRequest, Reply
from stages.storage.paths import DataPaths
from tests.support.pipeline_support import (
    NOTHING_TO_DO,
    PROSE_ANSWER,
    TEST_API_KEY,
    EmbeddedDefaultRun,
    ScriptedModel,
    assert_every_artifact_validates,
    assert_ok,
    command_line,
    data_args,
    descendants,
    doit_environment,
    files_containing,
    forbidden_imports,
    load_json,
    looping_answer,
    model_args,
    output_of,
    reference_answer,
    results_snapshot,
    run_dir,
    run_doit,
    run_doit_listing_imports,
    running,
    start_doit,
    step_statuses,
    steps_of,
    wrong_answer,
)
from tests.support.run_files import config_file, selection_file, summary_file

# ---------------------------------------------------------------------------
# Running doit
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# Problems, prompts and answers
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# 2. A real model: every status, counted by hand
# ---------------------------------------------------------------------------

MIXED_PROBLEMS = ("1", "3", "4", "29", "38")
MISSING_TARGETS_STEP = "29.2"


@pytest.fixture
def targets_without_one_step(tmp_path: Path, dev_targets: Path) -> Path:
    """A copy of the validation targets whose group of MISSING_TARGETS_STEP is deleted."""
    path = tmp_path / "targets_missing_one_step.h5"
    shutil.copyfile(dev_targets, path)
    path.chmod(0o644)
    with h5py.File(path, "r+") as handle:
        del handle[MISSING_TARGETS_STEP]
    return path


@pytest.mark.slow
def test_real_model_run_counts_every_status(
    workdir: Path, staged_data_dir: Path, targets_without_one_step: Path, start_server
) -> None:
    steps = steps_of(staged_data_dir, MIXED_PROBLEMS, "validation")
    replies = {
        "3.1": wrong_answer(steps["3.1"]),  # fail
        "4.1": looping_answer(steps["4.1"]),  # timeout
        "38.3": PROSE_ANSWER,  # parse_error (tool_use: one reminder, answered in prose again)
    }
    model = ScriptedModel(steps, replies)
    server = start_server(model)
    result = run_doit(
        workdir,
        *data_args(staged_data_dir, targets_without_one_step),
        *model_args(server),
        "split=validation",
        f"sample_ids={','.join(MIXED_PROBLEMS)}",
        "step_timeout_seconds=3",
        "allow_missing_targets=true",
        api_key=TEST_API_KEY,
    )  # else the preflight stops the run
    # A step without targets is reported, never silently ignored: the problem is listed and doit fails.
    assert result.returncode == 1, output_of(result)
    assert (
        "FAILED summarize: 1 problem(s) have steps without targets (29): stage the official test_data.h5"
        in result.stderr
    )

    run = run_dir(workdir, "acme-coder-1", "validation-tool_use-bg")
    summary = load_json(summary_file(run, "json"))
    # Hand count: 9 scored steps; pass 1.1, 29.1, 29.3 (carries the reference 29.2), 38.1, 38.2;
    # only problem 1 has every step passing.
    assert {
        name: summary[name]
        for name in (
            "main_problem_resolved",
            "main_problem_total",
            "subproblem_correct",
            "subproblem_total",
            "Total",
            "Evaluated",
            "Error",
            "skipped_steps",
        )
    } == {
        "main_problem_resolved": 1,
        "main_problem_total": 5,
        "subproblem_correct": 5,
        "subproblem_total": 9,
        "Total": 5,
        "Evaluated": 5,
        "Error": 0,
        "skipped_steps": 0,
    }
    assert summary["status_counts"] == {
        "pass": 5,
        "fail": 1,
        "timeout": 1,
        "parse_error": 1,
        "eval_error": 1,
        "skipped": 0,
        "not_generated": 0,
        "no_verdict": 0,
    }
    assert summary["targets"]["kind"] == "explicit"
    assert [entry["problem_id"] for entry in summary["failed_problems"]] == ["29"]
    assert "29.2: eval_error" in summary["failed_problems"][0]["reason"]
    assert step_statuses(run / "details") == {
        "1.1": "pass",
        "3.1": "fail",
        "4.1": "timeout",
        "29.1": "pass",
        "29.2": "eval_error",
        "29.3": "pass",
        "38.1": "pass",
        "38.2": "pass",
        "38.3": "parse_error",
    }
    asked = model.counts()
    assert asked.pop("38.3") == 2  # the prose answer got one reminder
    assert set(asked.values()) == {1} and len(asked) == 8
    assert model.unauthorized == 0
    assert files_containing(workdir, TEST_API_KEY) == []
    summary_md = summary_file(run, "md").read_text(encoding="utf-8")
    assert "1/5 (20.0%)" in summary_md
    assert "5/9 (55.6%)" in summary_md


# ---------------------------------------------------------------------------
# 1. The embedded default: gold on the validation split, targets derived from reference code
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_embedded_default_run_then_noop_rerun(embedded_default_run: EmbeddedDefaultRun) -> None:
    workdir, staged_data_dir, first = (
        embedded_default_run.workdir,
        embedded_default_run.data_dir,
        embedded_default_run.result,
    )
    assert_ok(first)
    run = run_dir(workdir, "gold", "validation-tool_use-bg")
    summary_md = summary_file(run, "md").read_text(encoding="utf-8")
    head = "\n".join(summary_md.splitlines()[:5])
    assert "targets derived from reference code, not the official test_data.h5" in head
    assert "15/15 (100.0%)" in summary_md and "50/50 (100.0%)" in summary_md
    summary = load_json(summary_file(run, "json"))
    assert (summary["main_problem_resolved"], summary["main_problem_total"]) == (15, 15)
    assert (summary["subproblem_correct"], summary["subproblem_total"]) == (50, 50)
    assert summary["targets"]["kind"] == "derived" and summary["failed_problems"] == []
    assert re.search(r"\[targets derived from reference code(; [^\]\n]+)?\]", first.stdout), (
        first.stdout
    )  # first caveat
    for line in (
        "generate   15/15 done, 0 up-to-date, 0 failed",
        "score      15/15 done, 0 up-to-date, 0 failed",
        "targets    1/1 done",
        "summarize  1/1 done",
        "== run finished",
    ):
        assert line in first.stderr, first.stderr

    # The no-op rerun, in a fresh interpreter: nothing re-run, no output touched, and neither the model
    # client nor the scoring engine imported (what they cost is what made a no-op rerun slow).
    before = results_snapshot(workdir)
    second, imported = run_doit_listing_imports(workdir, *data_args(staged_data_dir, None))
    assert_ok(second)
    assert NOTHING_TO_DO in second.stderr
    assert "generate   0/15 done, 15 up-to-date, 0 failed" in second.stderr
    assert "score      0/15 done, 15 up-to-date, 0 failed" in second.stderr
    assert results_snapshot(workdir) == before
    assert "stages.generate.stage" in imported and "stages.score.parent.stage" in imported  # the probe saw the run
    assert forbidden_imports(imported) == []


# ---------------------------------------------------------------------------
# 1b. Streaming: a problem is scored while the others are still being generated
# ---------------------------------------------------------------------------

STREAMED_PROBLEMS = ("1", "19", "29", "38")  # 1 + 2 + 3 + 3 steps
SLOW_ANSWER_SECONDS = 4.0  # problem 1 must be scored within the 8 answers that follow it, on a loaded machine


def first_appearances(folder: Path, seen: dict[str, float]) -> None:
    """Record when each file of `folder` was first seen."""
    if folder.is_dir():
        for path in folder.glob("*.json"):
            seen.setdefault(path.stem, time.monotonic())


@pytest.mark.slow
def test_first_problem_is_scored_while_generation_is_still_running(
    workdir: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    # Problem 1 is the slowest to score by the verdict cache's last durations: it is generated first.
    verdicts = workdir / ".scicode" / "verdicts"
    verdicts.mkdir(parents=True)
    (verdicts / "durations.json").write_text(json.dumps({"1.1": 100.0}), encoding="utf-8")
    args = (
        *data_args(staged_data_dir, dev_targets),
        "model=gold",
        "split=validation",
        "mode=naive",
        "concurrency=1",
        f"sample_ids={','.join(STREAMED_PROBLEMS)}",
    )
    environment = {**doit_environment(), LATENCY_VARIABLE: str(SLOW_ANSWER_SECONDS)}
    run = run_dir(workdir, "gold", "validation-naive-bg")
    process = start_doit(workdir, *args, env=environment)
    generations: dict[str, float] = {}
    details: dict[str, float] = {}
    unfinished_at_first_details: list[str] = []
    try:
        deadline = time.monotonic() + 400
        while process.poll() is None:
            assert time.monotonic() < deadline, "the run did not finish"
            first_appearances(run / "generations", generations)
            first_appearances(run / "details", details)
            if details and not unfinished_at_first_details:
                unfinished_at_first_details = [
                    problem_id
                    for problem_id in STREAMED_PROBLEMS
                    if problem_id not in generations
                    or load_json(run / "generations" / f"{problem_id}.json")["status"] != "complete"
                ]
                unfinished_at_first_details.append("checked")
            time.sleep(0.05)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
    assert process.returncode == 0, stdout + stderr

    # Slowest to score first, the very first admission included (doit starts the threads in a burst; the
    # problem pool lets them all queue before it admits one).
    ranked = sorted(generations, key=generations.__getitem__)
    assert ranked == ["1", "29", "38", "19"], ranked
    assert min(details, key=details.__getitem__) == ranked[0]
    # When problem 1's details appeared, later problems were still being generated (19, the last one, at least).
    timeline = f"unfinished: {unfinished_at_first_details}, generations: {generations}, details: {details}"
    assert unfinished_at_first_details[-1] == "checked" and "19" in unfinished_at_first_details, timeline
    summary = load_json(summary_file(run, "json"))  # a sample_ids subset: summary-<tag>.json
    assert (summary["subproblem_correct"], summary["subproblem_total"], summary["main_problem_resolved"]) == (9, 9, 4)
    progress = [line for line in stderr.splitlines() if line.startswith("progress: ")]
    assert progress and progress[-1].startswith("progress: generated 4/4, scored 4/4, steps passed 9/9 (100.0%)")
    assert "generate   4/4 done, 0 up-to-date, 0 failed" in stderr and "score      4/4 done" in stderr


# ---------------------------------------------------------------------------
# 3. split=all and split=test with a replay file: denominators 338 and 288
# ---------------------------------------------------------------------------


def write_wrong_replay(path: Path, data_dir: Path) -> Path:
    """A replay file answering every non-prefilled step of both splits with a fast wrong function."""
    answers = {
        step.step_id: wrong_answer(step)
        for problem in load_problems(DataPaths(data_dir), "all")
        for step in problem.steps
        if not step.prefilled
    }
    path.write_text(json.dumps(answers), encoding="utf-8")
    return path


def only_run_dir(workdir: Path, run: str) -> Path:
    found = list((workdir / "results" / "scicode").glob(f"*/{run}"))
    assert len(found) == 1, found
    return found[0]


@pytest.mark.slow
def test_all_and_test_splits_count_every_scored_step(workdir: Path, staged_data_dir: Path, dev_targets: Path) -> None:
    replay = write_wrong_replay(workdir / "wrong_answers.json", staged_data_dir)
    # The test split has no targets here: allowed, so that the preflight lets the run count them.
    common = (*data_args(staged_data_dir, dev_targets), f"model=replay:{replay}", "allow_missing_targets=true")

    started = time.monotonic()
    everything = run_doit(workdir, *common, "split=all", timeout=900)
    print(f"split=all with replay: {time.monotonic() - started:.1f} s")
    # The test split has no targets here: its 288 steps are eval_error, reported as failed problems.
    assert everything.returncode == 1, output_of(everything)
    assert "FAILED summarize: 65 problem(s) have steps without targets (77, 11," in everything.stderr
    summary = load_json(summary_file(only_run_dir(workdir, "all-tool_use-bg"), "json"))
    assert (summary["Total"], summary["subproblem_total"], summary["skipped_steps"]) == (80, 338, 3)
    assert (summary["subproblem_correct"], summary["main_problem_resolved"]) == (0, 0)
    assert summary["status_counts"]["skipped"] == 3
    assert summary["status_counts"]["eval_error"] == 288
    assert summary["status_counts"]["fail"] + summary["status_counts"]["timeout"] == 50
    assert summary["by_split"]["validation"]["subproblem_total"] == 50
    assert summary["by_split"]["test"]["subproblem_total"] == 288

    # Categories of SciCode's website: 5 fields and 16 subfields that add up to every problem and step.
    assert len(summary["by_field"]) == 5 and len(summary["by_subfield"]) == 16
    for groups in (summary["by_field"], summary["by_subfield"]):
        assert sum(group["Total"] for group in groups.values()) == 80
        assert sum(group["subproblem_total"] for group in groups.values()) == 338
    assert summary["by_field"]["Physics"]["Total"] == 37
    assert (summary["by_subfield"]["Optics"]["field"], summary["by_subfield"]["Optics"]["Total"]) == ("Physics", 10)
    markdown = (only_run_dir(workdir, "all-tool_use-bg") / "summary.md").read_text(encoding="utf-8")
    assert "## By field" in markdown and "## By subfield" in markdown and "| Material Science |" in markdown

    started = time.monotonic()
    test_only = run_doit(workdir, *common, "split=test", timeout=900)
    print(f"split=test with replay: {time.monotonic() - started:.1f} s")
    assert test_only.returncode == 1, output_of(test_only)
    summary = load_json(summary_file(only_run_dir(workdir, "test-tool_use-bg"), "json"))
    assert (summary["Total"], summary["subproblem_total"], summary["skipped_steps"]) == (65, 288, 3)
    assert summary["status_counts"]["eval_error"] == 288
    assert summary["by_split"].keys() == {"test"}


@pytest.mark.slow
def test_category_selects_a_field_or_subfields(workdir: Path, staged_data_dir: Path, dev_targets: Path) -> None:
    common = (*data_args(staged_data_dir, dev_targets), "model=gold", "split=validation")
    run = run_dir(workdir, "gold", "validation-tool_use-bg")

    assert_ok(run_doit(workdir, "run", *common, "category=Mathematics", timeout=900))
    selection = load_json(selection_file(run))
    assert [p["problem_id"] for p in selection["problems"]] == ["1", "3", "4", "78", "29"]
    summary = load_json(summary_file(run, "json"))  # a category's summary-<tag>.json beside the full run's
    assert summary["category"] == ["Mathematics"] and list(summary["by_field"]) == ["Mathematics"]
    assert summary["by_subfield"].keys() == {"Numerical Linear Algebra", "Computational Mechanics"}
    assert load_json(config_file(run))["settings"]["category"] == ["Mathematics"]

    assert_ok(run_doit(workdir, "run", *common, "category=Numerical Linear Algebra,Optics", timeout=900))
    selection = load_json(selection_file(run))
    assert [p["problem_id"] for p in selection["problems"]] == ["1", "3", "4", "6", "7", "29"]
    [summary_path] = [path for path in run.glob("summary-*.json") if "optics" in path.name.lower()]
    summary = load_json(summary_path)
    assert list(summary["by_subfield"]) == ["Numerical Linear Algebra", "Optics"]
    assert (summary["Total"], summary["main_problem_resolved"]) == (6, 6)

    unknown = run_doit(workdir, "run", *common, "category=Optcs")
    assert unknown.returncode != 0
    lines = [line for line in unknown.stderr.splitlines() if "invalid category=Optcs" in line]
    assert lines and all("Numerical Linear Algebra" in line and "Material Science" in line for line in lines)


# ---------------------------------------------------------------------------
# 4. Incrementality: reruns never re-bill a model call and redo only what changed
# ---------------------------------------------------------------------------

SMALL_PROBLEMS = ("1", "3", "19")  # 4 steps, all quick to score


def tree_mtimes(root: Path) -> dict[str, int]:
    return {str(path.relative_to(root)): path.stat().st_mtime_ns for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.mark.slow
def test_reruns_redo_only_what_changed(workdir: Path, staged_data_dir: Path, dev_targets: Path, start_server) -> None:
    model = ScriptedModel(steps_of(staged_data_dir, SMALL_PROBLEMS, "validation"))
    server = start_server(model)
    common = (
        *data_args(staged_data_dir, dev_targets),
        *model_args(server),
        "split=validation",
        f"sample_ids={','.join(SMALL_PROBLEMS)}",
    )

    def doit(*extra: str) -> subprocess.CompletedProcess[str]:
        result = run_doit(workdir, *common, *extra, api_key=TEST_API_KEY)
        assert_ok(result)
        return result

    doit()
    assert model.total() == 4
    run = run_dir(workdir, "acme-coder-1", "validation-tool_use-bg")
    assert load_json(summary_file(run, "json"))["subproblem_correct"] == 4

    # A no-op rerun, then one without doit's database: nothing executes, no model call.
    before = tree_mtimes(run)
    assert NOTHING_TO_DO in doit().stderr
    (workdir / ".scicode" / "doit.sqlite3").unlink()
    assert NOTHING_TO_DO in doit().stderr
    assert model.total() == 4
    assert tree_mtimes(run) == before

    # A scoring setting: every problem is rescored, nothing is generated again.
    rescored = doit("step_timeout_seconds=120")
    assert "score      3/3 done" in rescored.stderr and "generate   0/3 done, 3 up-to-date" in rescored.stderr
    assert model.total() == 4
    after = tree_mtimes(run)
    for name in ("1", "3", "19"):
        assert after[f"generations/{name}.json"] == before[f"generations/{name}.json"]
        assert after[f"details/{name}.json"] != before[f"details/{name}.json"]
    assert load_json(config_file(run))["settings"]["step_timeout_seconds"] == 120

    # Another mode is another run: its own folder and model calls; the first run is left intact.
    naive = doit("step_timeout_seconds=120", "mode=naive")
    assert "generate   3/3 done" in naive.stderr
    assert model.total() == 8
    assert (
        load_json(summary_file(run_dir(workdir, "acme-coder-1", "validation-naive-bg"), "json"))["subproblem_correct"]
        == 4
    )
    assert tree_mtimes(run) == after

    # One deleted details file: only that problem is scored again, without a model call.
    (run / "details" / "3.json").unlink()
    redone = doit("step_timeout_seconds=120")
    assert "score      1/3 done, 2 up-to-date" in redone.stderr
    assert model.total() == 8
    final = tree_mtimes(run)
    assert final["details/1.json"] == after["details/1.json"] and final["details/19.json"] == after["details/19.json"]
    assert "details/3.json" in final
    assert {key: value for key, value in final.items() if key.startswith("generations/")} == {
        key: value for key, value in after.items() if key.startswith("generations/")
    }


# ---------------------------------------------------------------------------
# 5. One problem failing, then fixed
# ---------------------------------------------------------------------------

FAILING_PROBLEM = "19"
QUICK_RETRY = ErrorReply(500, "upstream overloaded", headers={"retry-after-ms": "20"}, code="server_error")


def failing_for(problem_id: str) -> Callable[[Step], Reply | str]:
    """Reference answers, except HTTP 500 for every step of `problem_id`."""

    def reply(step: Step) -> Reply | str:
        return QUICK_RETRY if step.step_id.split(".")[0] == problem_id else reference_answer(step)

    return reply


@pytest.mark.slow
def test_failed_problem_is_counted_then_resumed(
    workdir: Path, staged_data_dir: Path, dev_targets: Path, start_server
) -> None:
    steps = steps_of(staged_data_dir, SMALL_PROBLEMS, "validation")
    broken = ScriptedModel(steps, default=failing_for(FAILING_PROBLEM))
    common = (
        *data_args(staged_data_dir, dev_targets),
        "split=validation",
        f"sample_ids={','.join(SMALL_PROBLEMS)}",
        "max_retries=2",
    )

    first = run_doit(workdir, *common, *model_args(start_server(broken)), api_key=TEST_API_KEY)
    assert first.returncode == 1, output_of(first)
    assert "FAILED summarize: 1 problem(s) failed in generation or scoring (19)" in first.stderr
    assert "generate 19: failed at step 19.1" in first.stderr
    assert broken.counts() == {"1.1": 1, "3.1": 1, "19.1": 3}  # two retries, then the problem stops
    run = run_dir(workdir, "acme-coder-1", "validation-tool_use-bg")
    summary = load_json(summary_file(run, "json"))
    assert (summary["Total"], summary["Evaluated"], summary["Error"]) == (3, 3, 1)
    assert (summary["main_problem_resolved"], summary["main_problem_total"]) == (2, 3)
    assert (summary["subproblem_correct"], summary["subproblem_total"]) == (2, 4)
    assert [entry["problem_id"] for entry in summary["failed_problems"]] == [FAILING_PROBLEM]
    assert "500" in summary["failed_problems"][0]["reason"]
    assert load_json(run / "generations" / "19.json")["status"] == "error"
    assert "| 19 " in summary_file(run, "md").read_text(encoding="utf-8")

    # The endpoint is healthy again, restarted on another port: the endpoint is part of the run, so continuing
    # against it is said on purpose (endpoint_change=resume).
    healthy = ScriptedModel(steps)
    second = run_doit(
        workdir, *common, *model_args(start_server(healthy)), "endpoint_change=resume", api_key=TEST_API_KEY
    )
    assert_ok(second)
    assert healthy.counts() == {"19.1": 1, "19.2": 1}
    summary = load_json(summary_file(run, "json"))
    assert (summary["Error"], summary["main_problem_resolved"], summary["subproblem_correct"]) == (0, 3, 4)
    assert summary["failed_problems"] == []


# ---------------------------------------------------------------------------
# 7. A wrong model name stops the run; it never scores zero silently
# ---------------------------------------------------------------------------


def model_not_found(request: ModelRequest) -> Reply:
    return ErrorReply(404, "The requested model does not exist.", code="model_not_found")


def test_wrong_model_name_stops_the_run_with_one_line(
    workdir: Path, staged_data_dir: Path, dev_targets: Path, start_server
) -> None:
    server = start_server(model_not_found)
    result = run_doit(
        workdir,
        *data_args(staged_data_dir, dev_targets),
        *model_args(server, "gpt-typo"),
        "split=validation",
        api_key=TEST_API_KEY,
    )
    assert result.returncode == MODEL_NOT_SERVED.code, output_of(result)
    stopped = [line for line in result.stderr.splitlines() if line.startswith("scicode: ")]
    assert len(stopped) == 1, result.stderr  # one line, not one per problem
    assert "model=gpt-typo is not served" in stopped[0] and "HTTP 404" in stopped[0]
    assert "Traceback" not in output_of(result) and "FAILED generate:" not in result.stderr
    assert len(server.requests) == 1  # the preflight's probe; a 404 is never retried
    run = run_dir(workdir, "gpt-typo", "validation-tool_use-bg")
    assert not list(run.glob("summary*"))
    assert not (run / "details").exists()
    assert not list((run / "generations").glob("*.json")) if (run / "generations").exists() else True


# ---------------------------------------------------------------------------
# 6. Interruptions: SIGTERM and SIGKILL in the middle of generation
# ---------------------------------------------------------------------------

INTERRUPTED_PROBLEMS = ("70", "29", "38")  # 14 steps, generated three problems at a time


def interrupt_during_generation(
    workdir: Path, args: tuple[str, ...], model: ScriptedModel, after_requests: int, signum: int
) -> subprocess.CompletedProcess[str]:
    """Start `doit`, send `signum` once the server has received `after_requests` requests in total, wait for exit."""
    process = start_doit(workdir, *args)
    try:
        deadline = time.monotonic() + 120
        while model.total() < after_requests:
            assert process.poll() is None, "doit finished before the interruption"
            assert time.monotonic() < deadline, "doit never reached the interruption point"
            time.sleep(0.01)
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        try:
            os.killpg(process.pid, signal.SIGKILL)  # anything the killed doit left in its session
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def asked_in_flight(asked: list[str]) -> set[str]:
    """The last step asked of each problem: the only ones that can be in flight when a run is killed."""
    return {
        max((s for s in asked if s.split(".")[0] == pid), key=asked.index) for pid in {s.split(".")[0] for s in asked}
    }


@pytest.mark.slow
def test_sigterm_and_sigkill_mid_generation_resume_without_loss(
    workdir: Path, staged_data_dir: Path, dev_targets: Path, start_server
) -> None:
    steps = steps_of(staged_data_dir, INTERRUPTED_PROBLEMS, "validation")
    model = ScriptedModel(steps, stall_seconds=0.4)
    args = (
        *data_args(staged_data_dir, dev_targets),
        *model_args(start_server(model)),
        "split=validation",
        f"sample_ids={','.join(INTERRUPTED_PROBLEMS)}",
    )
    run = run_dir(workdir, "acme-coder-1", "validation-tool_use-bg")

    terminated = interrupt_during_generation(workdir, args, model, 5, signal.SIGTERM)
    assert terminated.returncode != 0
    assert (
        "scicode: interrupted (terminated by signal 15); running tests and tool snippets were stopped, finished work is saved"
        in terminated.stderr
    )
    assert "Traceback" not in terminated.stderr
    first = list(model.asked)
    assert 5 <= len(first) < len(steps)
    assert_every_artifact_validates(run)
    saved = load_json(run / "generations" / "70.json")
    assert saved["status"] == "error" and saved["error"].startswith("incomplete: stopped before step")

    killed = interrupt_during_generation(workdir, args, model, len(first) + 5, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    second = model.asked[len(first) :]
    assert_every_artifact_validates(run)

    final = run_doit(workdir, *args, api_key=TEST_API_KEY)
    assert_ok(final)
    third = model.asked[len(first) + len(second) :]

    for asked in (first, second, third):
        assert len(asked) == len(set(asked)), asked  # never twice in one run
    assert set(first) | set(second) | set(third) == set(steps)
    # A step asked in two runs was in flight when the earlier run was killed.
    assert set(first) & set(second) <= asked_in_flight(first)
    assert set(second) & set(third) <= asked_in_flight(second)
    assert (set(first) & set(third)) <= asked_in_flight(first)
    assert len(model.asked) <= len(steps) + 2 * len(INTERRUPTED_PROBLEMS)

    assert_every_artifact_validates(run)
    summary = load_json(summary_file(run, "json"))
    assert (summary["subproblem_correct"], summary["subproblem_total"], summary["main_problem_resolved"]) == (14, 14, 3)
    for problem_id in INTERRUPTED_PROBLEMS:
        record = load_json(run / "generations" / f"{problem_id}.json")
        assert record["status"] == "complete" and all(step["status"] == "ok" for step in record["steps"])
    print(f"requests per run: {len(first)}, {len(second)}, {len(third)} for {len(steps)} steps")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to follow the test processes")
def test_sigkill_during_scoring_leaves_no_test_process_running(
    workdir: Path, staged_data_dir: Path, dev_targets: Path, start_server
) -> None:
    steps = steps_of(staged_data_dir, ("4",), "validation")
    model = ScriptedModel(steps, {"4.1": looping_answer(steps["4.1"])})
    args = (
        *data_args(staged_data_dir, dev_targets),
        *model_args(start_server(model)),
        "split=validation",
        "sample_ids=4",
    )
    process = start_doit(workdir, *args, "step_timeout_seconds=120")
    generation = run_dir(workdir, "acme-coder-1", "validation-tool_use-bg") / "generations" / "4.json"
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while not (generation.exists() and load_json(generation)["status"] == "complete" and seen):
            assert process.poll() is None and time.monotonic() < deadline, "scoring never started"
            seen |= descendants(process.pid)
            time.sleep(0.05)
        time.sleep(1.0)  # the test process (forked by the warm interpreter, or fresh) is in its endless loop
        seen |= descendants(process.pid)
        process.kill()
        process.communicate(timeout=30)
        deadline = time.monotonic() + 30  # the kernel tears the namespaces down; slow on a loaded machine
        while running(seen) and time.monotonic() < deadline:
            time.sleep(0.1)
        survivors = {pid: command_line(pid) for pid in running(seen)}
        assert not survivors, f"processes left running after SIGKILL of doit: {survivors}"
    finally:
        for pid in running(seen):
            os.kill(pid, signal.SIGKILL)

    # The rerun scores the step again (a shorter limit: a quick timeout verdict); the model is not asked again.
    rerun = run_doit(workdir, *args, "step_timeout_seconds=2", api_key=TEST_API_KEY)
    assert_ok(rerun)
    assert model.total() == 1
    assert step_statuses(run_dir(workdir, "acme-coder-1", "validation-tool_use-bg") / "details") == {"4.1": "timeout"}
