"""Runs under real conditions, as real `doit` processes in temp folders: one run at a time per run folder, the
preflight before any model call, a prompt stop on Ctrl-C / SIGTERM, `doit clean`, one-line refusals.

A "real" model is a `ModelServer` in this process (tests/pipeline/test_pipeline.py's ScriptedModel); the built-in `gold`
model runs each reference code through the local code_interpreter first, so an `execution_preamble` that sleeps
gives tool snippets that are running when the signal comes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.fake_sandbox import FakeSandbox, run_result
from tests.support.pipeline_support import (
    TEST_API_KEY,
    ScriptedModel,
    assert_every_artifact_validates,
    assert_ok,
    data_args,
    descendants,
    load_json,
    looping_answer,
    model_args,
    output_of,
    run_doit,
    running,
    start_doit,
    step_statuses,
    steps_of,
    wrong_answer,
)
from tests.support.process_scan import runs_a_step
from tests.support.run_files import summary_file

STOP_LIMIT_SECONDS = 2.0
INTERRUPTED_LINE = "scicode: interrupted ("
SMALL = ("70", "29", "38")  # 14 steps


def wait_until(condition: Callable[[], bool], process: subprocess.Popen[str], what: str, limit: float = 240) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert process.poll() is None, f"doit ended before {what}: {process.communicate()}"
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.05)


def cmdlines(pids: set[int]) -> dict[int, str]:
    found = {}
    for pid in pids:
        try:
            found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            pass
    return found


def children_running(process: subprocess.Popen[str], marker: str, unless: str = "\0") -> set[int]:
    return {pid for pid, line in cmdlines(descendants(process.pid)).items() if marker in line and unless not in line}


@pytest.fixture
def reaper() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test started: whatever is left of their sessions is killed at the end."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_and_time(process: subprocess.Popen[str], *signals: int) -> tuple[float, str]:
    """Send `signals` (0.2 s apart); the seconds until doit exited after the first, and its stderr."""
    started = time.monotonic()
    for index, signum in enumerate(signals):
        if index:
            time.sleep(0.2)
        if process.poll() is None:
            process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    return time.monotonic() - started, stderr


def assert_one_stop_line(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert sum(INTERRUPTED_LINE in line for line in lines) == 1, stderr
    assert INTERRUPTED_LINE in lines[-1], stderr


# ---------------------------------------------------------------------------
# One run at a time
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_second_run_on_the_same_folder_stops_at_once_and_nothing_is_billed_twice(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path, start_server, reaper
) -> None:
    steps = steps_of(staged_data_dir, SMALL, "validation")
    answers_held = threading.Event()  # the first run's answers wait until every competing command was refused
    model = ScriptedModel(steps, stall_seconds=0.3, gate=answers_held)
    args = (
        *data_args(staged_data_dir, dev_targets),
        *model_args(start_server(model)),
        "split=validation",
        f"sample_ids={','.join(SMALL)}",
        "mode=naive",
        "concurrency=1",
    )
    lock = tmp_path / "results" / "scicode" / "acme-coder-1" / "validation-naive-bg" / ".lock"
    first = start_doit(tmp_path, *args)
    reaper.append(first)
    wait_until(lambda: model.total() >= 1, first, "asked the model")
    holder = json.loads(lock.read_text())
    assert holder["pid"] == first.pid and "run" not in holder["command"].split()[:1]

    started = time.monotonic()
    for command in (("run",), ("generate",), ("score",)):
        second = run_doit(tmp_path, *command, *args, api_key=TEST_API_KEY, timeout=120)
        assert second.returncode == 4, output_of(second)
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and f"pid {first.pid} on " in lines[0] and "is in use by another run" in lines[0], lines
    assert time.monotonic() - started < 30
    assert first.poll() is None, "the first run must go on"
    answers_held.set()
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    assert set(model.counts().values()) == {1} and len(model.counts()) == len(steps)  # every step asked once
    assert not lock.exists()


@pytest.mark.slow
def test_a_stale_lock_of_a_killed_run_is_taken_over(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path, start_server, reaper
) -> None:
    steps = steps_of(staged_data_dir, SMALL, "validation")
    model = ScriptedModel(steps, stall_seconds=0.3)
    args = (
        *data_args(staged_data_dir, dev_targets),
        *model_args(start_server(model)),
        "split=validation",
        f"sample_ids={','.join(SMALL)}",
        "mode=naive",
        "concurrency=1",
    )
    lock = tmp_path / "results" / "scicode" / "acme-coder-1" / "validation-naive-bg" / ".lock"
    killed = start_doit(tmp_path, *args)
    reaper.append(killed)
    wait_until(lambda: model.total() >= 2, killed, "asked the model")
    os.killpg(killed.pid, signal.SIGKILL)
    killed.communicate(timeout=30)
    assert json.loads(lock.read_text())["pid"] == killed.pid  # left behind by the dead process

    rerun = run_doit(tmp_path, *args, api_key=TEST_API_KEY)
    assert_ok(rerun)
    assert load_json(summary_file(lock.parent))["subproblem_correct"] == 14
    assert not lock.exists()


# ---------------------------------------------------------------------------
# A prompt stop
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_during_scoring_kills_the_tests_at_once(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path, start_server, reaper
) -> None:
    steps = steps_of(staged_data_dir, ("4",), "validation")
    model = ScriptedModel(steps, {"4.1": looping_answer(steps["4.1"])})
    args = (
        *data_args(staged_data_dir, dev_targets),
        *model_args(start_server(model)),
        "split=validation",
        "sample_ids=4",
        "mode=naive",
    )
    run = tmp_path / "results" / "scicode" / "acme-coder-1" / "validation-naive-bg"
    process = start_doit(tmp_path, *args, "step_timeout_seconds=300")
    reaper.append(process)
    generation = run / "generations" / "4.json"
    wait_until(
        lambda: generation.exists() and any(map(runs_a_step, descendants(process.pid))),
        process,
        "started the test process",
    )  # a confined process forked from the warm interpreter runs the step
    time.sleep(1.0)  # the test is in its endless loop
    seen = descendants(process.pid)

    took, stderr = stop_and_time(process, signal.SIGINT, signal.SIGINT)  # a second Ctrl-C changes nothing
    print(f"Ctrl-C during scoring: doit exited {took:.2f} s after the signal")
    assert took < STOP_LIMIT_SECONDS
    assert process.returncode == 130
    assert_one_stop_line(stderr)
    assert not running(seen), cmdlines(running(seen))
    assert not (run / "details" / "4.json").exists()  # the killed test is not a verdict
    assert not (run / ".lock").exists()

    rerun = run_doit(tmp_path, *args, "step_timeout_seconds=2", api_key=TEST_API_KEY)
    assert model.total() == 1  # the finished generation was kept
    assert step_statuses(run / "details") == {"4.1": "timeout"}, output_of(rerun)


@pytest.mark.slow
def test_sigterm_during_generation_kills_the_tool_snippets_at_once(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path, reaper
) -> None:
    args = (
        *data_args(staged_data_dir, dev_targets),
        "model=gold",
        "split=validation",
        "mode=tool_use",
        f"sample_ids={','.join(SMALL)}",
        "execution_preamble=import time; time.sleep(3)",
        "code_timeout_seconds=300",
    )
    run = tmp_path / "results" / "scicode" / "gold" / "validation-tool_use-bg"
    process = start_doit(tmp_path, *args)
    reaper.append(process)
    wait_until(
        lambda: (
            len(list((run / "generations").glob("*.json"))) == len(SMALL)
            and len(children_running(process, "_runner.py", unless="confine.py")) == len(SMALL)
        ),
        process,
        "ran the second steps' tool snippets",
    )
    time.sleep(0.5)
    seen = descendants(process.pid)

    took, stderr = stop_and_time(process, signal.SIGTERM)
    print(f"SIGTERM during generation with tool snippets: doit exited {took:.2f} s after the signal")
    assert took < STOP_LIMIT_SECONDS
    assert process.returncode == 128 + signal.SIGTERM
    assert_one_stop_line(stderr)
    assert not running(seen), cmdlines(running(seen))
    assert not [p.name for p in (tmp_path / ".scicode" / "interpreter").glob("snippet-*")]
    assert_every_artifact_validates(run)
    for path in (run / "generations").glob("*.json"):
        record = load_json(path)
        assert record["status"] == "error" and record["error"].startswith("incomplete: stopped before step")
        for step in record["steps"]:  # a snippet killed by the stop is never saved as a tool result
            assert step["tool_outcomes"] == {"ok": 1, "error": 0, "timeout": 0, "sandbox_error": 0}, step


# ---------------------------------------------------------------------------
# Preflight and one-line refusals
# ---------------------------------------------------------------------------


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [
        line for line in result.stderr.splitlines() if line.strip() and not line.startswith(("download ", "select "))
    ]
    assert len(lines) == 1, output_of(result)
    return lines[0]


def test_bad_selection_replay_and_task_names_are_one_line_before_any_work(
    tmp_path: Path, staged_data_dir: Path
) -> None:
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json", encoding="utf-8")
    cases = {
        ("category=nope",): "invalid category=nope: expected all, or one or more (any case) of the fields Mathematics",
        ("sample_ids=999",): "invalid sample_ids: problem id 999 is not in split=validation",
        ("model=replay:missing.json", "split=all"): "missing.json: no such file",
        (f"model=replay:{bad_json}", "split=all"): "not readable JSON",
        ("generate:999",): "unknown task generate:999: problem 999 is not in the selection",
        ("sandbox_memory_limit_mb=8",): "expected 0 (no limit) or a whole number >= 16",
    }
    for words, expected in cases.items():
        result = run_doit(tmp_path, *words, *data_args(staged_data_dir, None), timeout=120)
        assert result.returncode == 3, output_of(result)
        assert expected in one_line(result), output_of(result)
        assert not (tmp_path / "results").exists()
        assert "Traceback" not in output_of(result)


def test_settings_no_run_could_use_are_one_line_and_exit_3_before_any_work(tmp_path: Path) -> None:
    """Issue 39, finding 7: each was accepted and then bit (a run folder refusing its own configuration, every
    call failing) or gave a Python traceback."""
    cases = {
        ("execution_preamble=" + os.fsdecode(b"x = '\xff'"),): "invalid execution_preamble=x = '\\udcff'",
        ("request_timeout_seconds=1e10",): "expected a number > 0 and <= 86400",
        ('model_params={"temperature": 1e999}',): "not finite",
        ("model_params=" + '{"a": ' * 490 + "1" + "}" * 490,): "nested deeper than 32 levels",
        ("config=dated.toml",): "TOML date or time",
    }
    (tmp_path / "dated.toml").write_text("[model_params]\nseed = 1979-05-27T07:32:00Z\n", encoding="utf-8")
    for words, expected in cases.items():
        local_only = ("model=acme", "base_url=http://127.0.0.1:9/v1", "dataset_zip_url=http://127.0.0.1:9/none.zip")
        result = run_doit(tmp_path, *words, *local_only, timeout=120)
        assert result.returncode == 3, output_of(result)
        assert "Traceback" not in output_of(result)
        (line,) = [line for line in result.stderr.splitlines() if line.strip()]
        assert line.startswith("scicode: config error: invalid ") and expected in line, line
        assert not (tmp_path / "results").exists()


def test_a_replay_file_lacking_selected_steps_is_refused_naming_them_and_the_ids_it_holds(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    """A step the file lacks would be scored as the model's parse_error (0/3, exit 0): refused before any work."""
    replay = tmp_path / "partial.json"
    replay.write_text(json.dumps({"19.1": "```python\nx = 1\n```", "99.9": "spare"}), encoding="utf-8")
    args = (*data_args(staged_data_dir, dev_targets), f"model=replay:{replay}", "sample_ids=19,29", "mode=naive")
    result = run_doit(tmp_path, *args, timeout=180)
    assert result.returncode == 3, output_of(result)
    line = one_line(result)
    assert "no answer for 4: 19.2, 29.1, 29.2, 29.3 of the 5 selected scored steps" in line, line
    assert "it answers 2: 19.1, 99.9" in line and "Traceback" not in output_of(result)
    assert not list((tmp_path / "results").glob("scicode/*/*/generations/*.json"))


def test_missing_targets_stop_the_run_before_any_model_call(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path, start_server
) -> None:
    steps = steps_of(staged_data_dir, ("1", "77"))
    model = ScriptedModel(steps)
    args = (
        *data_args(staged_data_dir, dev_targets),
        *model_args(start_server(model)),
        "split=all",
        "sample_ids=1,77",
        "mode=naive",
    )
    refused = run_doit(tmp_path, *args, api_key=TEST_API_KEY)
    assert refused.returncode == 3
    line = one_line(refused)
    assert "12 of 13 scored steps have no targets" in line and "77.1" in line and "allow_missing_targets=true" in line
    # the two ways forward without the official file, and where that file comes from and how big it is
    assert "run split=validation" in line and "set h5py_file=<path to it>" in line, line
    assert "test_data.h5 (about 1.05 GB, from the official SciCode release" in line and "dataset_zip_url" in line
    assert model.total() == 0

    generated = run_doit(tmp_path, "generate", *args, api_key=TEST_API_KEY)  # only generation: targets not needed
    assert "have no targets" not in output_of(generated)
    assert {step_id.split(".")[0] for step_id in model.asked} == {"1", "77"}


@pytest.mark.slow
def test_allow_missing_targets_scores_the_rest_and_counts_the_unscored(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path, start_server
) -> None:
    steps = steps_of(staged_data_dir, ("1", "77"))
    model = ScriptedModel(steps, {step_id: wrong_answer(step) for step_id, step in steps.items() if step_id != "1.1"})
    args = (
        *data_args(staged_data_dir, dev_targets),
        *model_args(start_server(model)),
        "split=all",
        "sample_ids=1,77",
        "mode=naive",
        "allow_missing_targets=true",
    )
    result = run_doit(tmp_path, *args, api_key=TEST_API_KEY)
    assert "preflight: targets: 12 of 13 scored steps have no targets" in result.stdout, output_of(result)
    run = tmp_path / "results" / "scicode" / "acme-coder-1" / "all-naive-bg"
    summary = load_json(summary_file(run))
    assert len(summary["steps_without_targets"]) == 12 and summary["subproblem_correct"] == 1
    assert "**12 scored step(s) could not be scored: no targets**" in summary_file(run, "md").read_text()


def test_an_unwritable_results_folder_is_one_line(tmp_path: Path, staged_data_dir: Path) -> None:
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    if subprocess.run(["chattr", "+i", str(frozen)], capture_output=True).returncode != 0:
        if os.geteuid() == 0:
            pytest.skip("cannot make a folder read-only here (chattr +i refused and running as root)")
        frozen.chmod(0o555)
    try:
        result = run_doit(
            tmp_path, *data_args(staged_data_dir, None), f"results_dir={frozen}", "mode=naive", timeout=120
        )
    finally:
        subprocess.run(["chattr", "-i", str(frozen)], capture_output=True)
        frozen.chmod(0o755)
    assert result.returncode == 5, output_of(result)
    line = one_line(result)
    assert line.startswith(f"scicode: cannot write {frozen}/scicode") and "results_dir=" in line


# ---------------------------------------------------------------------------
# doit clean and per-selection summaries
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_clean_removes_derived_outputs_and_generations_only_by_name(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    args = (*data_args(staged_data_dir, dev_targets), "model=gold", "mode=naive")
    run = tmp_path / "results" / "scicode" / "gold" / "validation-naive-bg"
    assert_ok(run_doit(tmp_path, *args, "sample_ids=1,3"))
    assert_ok(run_doit(tmp_path, *args, "sample_ids=1"))
    names = {path.name for path in run.iterdir()}
    assert {
        "summary-ids-1_3.md",
        "summary-ids-1_3.json",
        "summary-ids-1.md",
        "summary-ids-1.json",
        "plots-ids-1_3",
        "plots-ids-1",
    } <= names  # the smaller selection did not replace the other's summary
    assert load_json(run / "summary-ids-1_3.json")["subproblem_total"] == 2

    cleaned = run_doit(tmp_path, "clean", *args, "sample_ids=1,3")
    assert_ok(cleaned)
    # that subset's outputs and its problems' details only: the other subset's summary stays
    names = {path.name for path in run.iterdir()}
    assert not names & {"summary-ids-1_3.md", "summary-ids-1_3.json", "plots-ids-1_3", "report-ids-1_3.html"}
    assert {"summary-ids-1.md", "summary-ids-1.json", "selection-ids-1.json", "selection-ids-1_3.json"} <= names
    assert not any((run / "details").glob("*.json"))
    assert sorted(path.name for path in (run / "generations").iterdir()) == ["1.json", "3.json"]
    assert "`doit clean generate model=gold run=validation-naive-bg confirm=true` removes them" in cleaned.stdout

    # generations of the selection last run (sample_ids=1), named and confirmed: removed; the others stay
    assert_ok(run_doit(tmp_path, "clean", "generate", *args, "sample_ids=1", "confirm=true"))
    assert sorted(path.name for path in (run / "generations").iterdir()) == ["3.json"]


# ---------------------------------------------------------------------------
# A sandbox that fails
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_whose_tool_calls_failed_in_the_sandbox_ends_non_zero(
    tmp_path: Path, staged_data_dir: Path, dev_targets: Path
) -> None:
    # The preflight probe succeeds, then every call gets HTTP 503.
    with FakeSandbox([(200, run_result(stdout="probe 1 2 3\n")), (503, {"detail": "overloaded"})]) as sandbox:
        args = (
            *data_args(staged_data_dir, dev_targets),
            "model=gold",
            "mode=tool_use",
            "sample_ids=1,3",
            f"sandbox_url={sandbox.url}",
            "sandbox_max_retries=0",
        )
        result = run_doit(tmp_path, *args)
    assert result.returncode != 0
    assert "2 of 2 tool calls failed in the code sandbox (sandbox_error)" in output_of(result)
    run = tmp_path / "results" / "scicode" / "gold" / "validation-tool_use-bg"
    summary = load_json(summary_file(run))
    assert summary["tool_calls"] == {"ok": 0, "error": 0, "timeout": 0, "sandbox_error": 2, "total": 2}
    details = load_json(run / "details" / "1.json")
    assert details["attempts"][0]["meta"]["tool_outcomes"]["total"]["sandbox_error"] == 1
    assert load_json(run / "generations" / "3.json")["steps"][0]["tool_outcomes"]["sandbox_error"] == 1
