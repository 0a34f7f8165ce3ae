"""The progress of a run (doit's reporter `RunProgress`): unit tests over real doit Task objects and failures, and real `doit` runs."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from doit.exceptions import TaskError, TaskFailed, UnmetDependency
from doit.task import Task
from tqdm import tqdm

from stages.config.settings import ConfigError
from stages.progress.failures import describe_failure, stage_of, step_failure_line
from stages.progress.live_view import format_elapsed
from stages.progress.run import RunProgress
from tests.support.hostile import ESCAPES, FAKE_TABLE

PROJECT_ROOT = Path(__file__).resolve().parents[2]
STAGE_LINE = re.compile(
    r"^(?P<stage>\S+) +(?P<done>\d+)/(?P<reached>\d+) done, (?P<up>\d+) up-to-date, "
    r"(?P<failed>\d+) failed(, \d+ ignored)?(, \d+ running)?  \[\d\d:\d\d\]$"
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def noop() -> None:
    return None


def make_task(name: str) -> Task:
    return Task(name, [noop])


def error_from(exception: BaseException) -> TaskError:
    """A TaskError as doit builds it for a python-action that raised `exception`."""
    try:
        raise exception
    except BaseException as raised:  # noqa: BLE001 - re-wrapped exactly like doit's PythonAction
        return TaskError("PythonAction Error", raised)


def make_progress(clock: FakeClock | None = None) -> tuple[RunProgress, io.StringIO]:
    stream = io.StringIO()
    progress = RunProgress(io.StringIO(), {}, stream=stream, clock=clock or FakeClock())
    return progress, stream


def run_ok(progress: RunProgress, task: Task) -> None:
    progress.get_status(task)
    progress.execute_task(task)
    progress.add_success(task)


def lines_of(stream: io.StringIO) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if line]


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def test_stage_of_and_elapsed_format() -> None:
    assert stage_of("generate:10") == "generate" and stage_of("summarize") == "summarize"
    assert stage_of("score:13:x") == "score"
    assert format_elapsed(41.9) == "00:41" and format_elapsed(725) == "12:05" and format_elapsed(3723) == "1:02:03"


def test_own_errors_are_one_line_foreign_errors_keep_their_traceback() -> None:
    own = describe_failure(make_task("select"), error_from(ConfigError("invalid split=foo: expected one of a, b")))
    # the pipeline's own error is its message: the class name is internal (issue 32)
    assert own.reason == "invalid split=foo: expected one of a, b" and own.detail is None

    foreign = describe_failure(make_task("score:3"), error_from(KeyError("missing")))
    assert foreign.reason == "KeyError: 'missing'"
    assert foreign.detail is not None and foreign.detail.startswith("Traceback (most recent call last)")

    guarded = describe_failure(make_task("download"), TaskFailed("DownloadError: checksum mismatch for x.zip"))
    assert guarded.reason == "DownloadError: checksum mismatch for x.zip" and guarded.detail is None

    unmet = describe_failure(make_task("summarize"), UnmetDependency("score"))
    assert unmet.reason == "not run: a task it depends on failed (score)"


def test_multiline_message_is_cut_to_its_first_line() -> None:
    note = describe_failure(make_task("select"), error_from(ConfigError("first line\nsecond line")))
    assert note.reason == "first line"


def test_failure_lines_and_tracebacks_never_reach_the_terminal_raw() -> None:
    # issue 20: model-derived text in a failure (an exception message, a traceback) is shown neutralised
    progress, stream = make_progress()
    for name, fail in (
        ("score:3", error_from(ValueError(f"step 3.1: {ESCAPES} {FAKE_TABLE}"))),
        ("generate:4", TaskFailed(f"generation failed: {ESCAPES}\ud800")),
    ):
        task = make_task(name)
        progress.get_status(task)
        progress.execute_task(task)
        progress.add_failure(task, fail)
    progress.complete_run()
    output = stream.getvalue()
    assert "\x1b" not in output and "\x07" not in output and "\x9b" not in output and "\ud800" not in output
    assert "FAILED score:3: ValueError: step 3.1: \\x1b[1A\\x1b[2K- 78.2 (pass)" in output
    assert "---- score:3 ----" in output and "Traceback" in output  # the traceback is kept, neutralised


# ---------------------------------------------------------------------------
# A fake task sequence
# ---------------------------------------------------------------------------


def test_counts_lines_and_failures_of_a_task_sequence() -> None:
    clock = FakeClock()
    progress, stream = make_progress(clock)
    download = make_task("download")
    progress.get_status(download)
    progress.skip_uptodate(download)
    generate = [make_task(f"generate:{i}") for i in range(5)]
    for task in generate[:2]:
        progress.get_status(task)
        progress.skip_uptodate(task)
    for task in generate[2:4]:
        clock.now += 3
        run_ok(progress, task)
    progress.get_status(generate[4])
    progress.execute_task(generate[4])
    progress.add_failure(generate[4], error_from(ConfigError("invalid model=x: expected a model id")))
    group = Task("generate", None, task_dep=[t.name for t in generate])
    progress.add_failure(group, UnmetDependency("generate:4"))  # group tasks are not reported twice
    clock.now += 10
    summarize = make_task("summarize")
    progress.get_status(summarize)
    progress.add_failure(summarize, UnmetDependency("generate"))
    progress.complete_run()

    assert progress.stage_counts() == {
        "download": {"reached": 1, "done": 0, "up_to_date": 1, "failed": 0, "ignored": 0, "running": 0},
        "generate": {"reached": 5, "done": 2, "up_to_date": 2, "failed": 1, "ignored": 0, "running": 0},
        "summarize": {"reached": 1, "done": 0, "up_to_date": 0, "failed": 1, "ignored": 0, "running": 0},
    }
    output = lines_of(stream)
    assert "FAILED generate:4: invalid model=x: expected a model id" in output
    assert "FAILED summarize: not run: a task it depends on failed (generate)" in output
    assert not any(line.startswith("FAILED generate:") and "UnmetDependency" in line for line in output)
    assert "Traceback" not in stream.getvalue()
    final = output[output.index("== run finished [00:16] ==") :]
    assert final[1:4] == [
        "download   0/1 done, 1 up-to-date, 0 failed  [00:00]",
        "generate   2/5 done, 2 up-to-date, 1 failed  [00:06]",
        "summarize  0/1 done, 0 up-to-date, 1 failed  [00:00]",
    ]
    assert "2 task(s) failed:" in final
    assert "nothing to do: everything up to date" not in output
    assert all(STAGE_LINE.match(line) for line in output if " done, " in line)


def test_progress_lines_are_throttled_per_stage() -> None:
    clock = FakeClock()
    progress, stream = make_progress(clock)
    tasks = [make_task(f"score:{i}") for i in range(6)]
    for task in tasks[:3]:
        clock.now += 1
        run_ok(progress, task)
    assert lines_of(stream) == []  # 2 s since the stage started (first seen at +1 s): below the 5 s interval
    clock.now += 3
    run_ok(progress, tasks[3])
    assert lines_of(stream) == ["score      4/4 done, 0 up-to-date, 0 failed  [00:05]"]
    clock.now += 1
    run_ok(progress, tasks[4])
    assert len(lines_of(stream)) == 1
    summarize = make_task("summarize")
    run_ok(progress, summarize)  # another stage takes over: the idle score stage shows its latest line
    assert lines_of(stream)[1] == "score      5/5 done, 0 up-to-date, 0 failed  [00:06]"


def test_running_tasks_are_shown_and_time_runs_to_now() -> None:
    clock = FakeClock()
    progress, stream = make_progress(clock)
    first, second = make_task("generate:1"), make_task("generate:2")
    for task in (first, second):
        progress.get_status(task)
        progress.execute_task(task)
    clock.now += 65
    progress.add_success(first)
    assert lines_of(stream) == ["generate   1/2 done, 0 up-to-date, 0 failed, 1 running  [01:05]"]


def test_everything_up_to_date_says_nothing_to_do() -> None:
    progress, stream = make_progress()
    for name in ("download", "select", "generate:1", "generate:2", "score:1", "score:2", "summarize"):
        task = make_task(name)
        progress.get_status(task)
        progress.skip_uptodate(task)
    progress.complete_run()
    output = lines_of(stream)
    assert output[-1] == "nothing to do: everything up to date"
    assert "generate   0/2 done, 2 up-to-date, 0 failed  [00:00]" in output


def test_ignored_tasks_and_runtime_errors() -> None:
    progress, stream = make_progress()
    task = make_task("generate:7")
    progress.get_status(task)
    progress.skip_ignore(task)
    progress.runtime_error("Task 'x' not found\nmore")
    progress.complete_run()
    output = lines_of(stream)
    assert "generate   0/1 done, 0 up-to-date, 0 failed, 1 ignored  [00:00]" in output
    assert "execution aborted: Task 'x' not found" in output
    assert "nothing to do: everything up to date" not in output


def test_private_and_group_tasks_are_not_counted() -> None:
    progress, _ = make_progress()
    run_ok(progress, make_task("_hidden"))
    progress.get_status(Task("score", None, task_dep=["score:1"]))
    progress.add_success(Task("score", None, task_dep=["score:1"]))
    assert progress.stage_counts() == {}


def test_concurrent_threads_give_exact_counts_and_whole_lines() -> None:
    progress, stream = make_progress(FakeClock())
    progress.min_interval_s = 0.0  # print on every event, to stress line integrity
    tasks = [make_task(f"generate:{i}") for i in range(400)]
    for task in tasks:
        progress.get_status(task)
    barrier = threading.Barrier(8)

    def work(chunk: list[Task]) -> None:
        barrier.wait()
        for task in chunk:
            progress.execute_task(task)
            progress.add_success(task)

    threads = [threading.Thread(target=work, args=(tasks[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    progress.complete_run()
    assert progress.stage_counts()["generate"] == {
        "reached": 400,
        "done": 400,
        "up_to_date": 0,
        "failed": 0,
        "ignored": 0,
        "running": 0,
    }
    lines = lines_of(stream)
    assert len(lines) >= 400
    assert all(STAGE_LINE.match(line) or line.startswith("== run finished") for line in lines), lines[:5]


def test_lines_go_above_a_progress_bar_on_the_same_stream() -> None:
    progress, stream = make_progress()
    progress.min_interval_s = 0.0
    with tqdm(total=3, file=stream, desc="score", ascii=True) as bar:
        bar.update(1)
        run_ok(progress, make_task("score:1"))
        bar.update(1)
    text = stream.getvalue()
    line = "score      1/1 done, 0 up-to-date, 0 failed  [00:00]"
    position = text.index(line)
    assert text[position - 1] in "\r\n" and text[position + len(line)] == "\n"


def test_a_broken_stream_never_breaks_the_run() -> None:
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError("stream closed")

    progress = RunProgress(io.StringIO(), {}, stream=Broken(), clock=FakeClock())
    task = make_task("select")
    progress.get_status(task)
    progress.add_failure(task, error_from(ConfigError("bad")))
    progress.complete_run()
    assert progress.stage_counts()["select"]["failed"] == 1


# ---------------------------------------------------------------------------
# Real doit runs
# ---------------------------------------------------------------------------

DODO = textwrap.dedent(
    """
    from stages.config.settings import ConfigError
    from stages.progress.run import RunProgress

    DOIT_CONFIG = {"reporter": RunProgress, "par_type": "thread", "num_process": 2, "continue": True,
                   "backend": "sqlite3", "dep_file": "doit.sqlite3", "verbosity": 2}


    def refuse():
        raise ConfigError("invalid split=nope: expected one of validation, test, all")


    def write_ok(targets):
        with open(targets[0], "w") as handle:
            handle.write("ok")


    def task_good():
        return {"actions": [write_ok], "targets": ["good.txt"], "uptodate": [True]}


    def task_bad():
        return {"actions": [refuse], "task_dep": ["good"]}


    def task_work():
        for index in range(3):
            yield {"name": str(index), "actions": [write_ok], "targets": [f"work{index}.txt"], "uptodate": [True]}
    """
)


def run_doit(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "doit", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_real_doit_run_with_a_failing_and_a_succeeding_task(tmp_path: Path) -> None:
    (tmp_path / "dodo.py").write_text(DODO, encoding="utf-8")
    first = run_doit(tmp_path, "good", "bad", "work")
    assert first.returncode == 2, first.stderr  # doit's code for a task error, as with its own reporter
    err = first.stderr
    assert "FAILED bad: invalid split=nope: expected one of validation, test, all" in err and "ConfigError" not in err
    assert "Traceback" not in err and "Traceback" not in first.stdout
    assert "good       1/1 done, 0 up-to-date, 0 failed" in err
    assert "work       3/3 done, 0 up-to-date, 0 failed" in err
    assert "bad        0/1 done, 0 up-to-date, 1 failed" in err
    assert "1 task(s) failed:" in err
    assert (tmp_path / "good.txt").read_text() == "ok"

    console = run_doit(tmp_path, "--reporter", "console", "good", "bad")
    assert console.returncode == first.returncode

    again = run_doit(tmp_path, "good", "work")
    assert again.returncode == 0, again.stderr
    assert "good       0/1 done, 1 up-to-date, 0 failed" in again.stderr
    assert "work       0/3 done, 3 up-to-date, 0 failed" in again.stderr
    assert again.stderr.rstrip().endswith("nothing to do: everything up to date")


@pytest.mark.slow
def test_real_doit_run_failure_exit_code_for_a_failed_task(tmp_path: Path) -> None:
    dodo = DODO + textwrap.dedent(
        """

        def task_falsy():
            return {"actions": [lambda: False]}
        """
    )
    (tmp_path / "dodo.py").write_text(dodo, encoding="utf-8")
    ours = run_doit(tmp_path, "falsy")
    console = run_doit(tmp_path, "--reporter", "console", "falsy")
    assert ours.returncode == console.returncode == 1
    assert "FAILED falsy: Python Task failed:" in ours.stderr


def test_failures_with_one_reason_are_shown_once_and_listed_as_one_line() -> None:
    progress, stream = make_progress()
    reason = "model call failed for every problem (model=ghost): HTTP 404; check model= and base_url="
    generate = [make_task(f"generate:{i}") for i in range(12)]
    score = [make_task(f"score:{i}") for i in range(12)]
    for task in generate:
        progress.get_status(task)
        progress.execute_task(task)
        progress.add_failure(task, TaskFailed(f"RunAborted: {reason}"))
    other = make_task("generate:99")
    progress.get_status(other)
    progress.add_failure(other, TaskFailed("RunAborted: another reason"))
    for task in score:
        progress.get_status(task)
        progress.add_failure(task, UnmetDependency(task.name.replace("score", "generate")))
    summarize = make_task("summarize")
    progress.get_status(summarize)
    progress.add_failure(summarize, UnmetDependency("score"))
    progress.complete_run()

    output = lines_of(stream)
    assert sum(reason in line for line in output if line.startswith("FAILED")) == 1
    assert "FAILED generate:0: RunAborted: " + reason in output
    assert "FAILED generate:99: RunAborted: another reason" in output
    assert sum(line.startswith("FAILED score:") for line in output) == 1
    assert "FAILED summarize: not run: a task it depends on failed (score)" in output
    final = output[output.index("26 task(s) failed:") + 1 :]
    assert final == [
        "  generate:0, generate:1, generate:2, generate:3, generate:4, generate:5, generate:6, generate:7 and 4 more"
        " (12 tasks): RunAborted: " + reason,
        "  generate:99: RunAborted: another reason",
        "  score:0, score:1, score:2, score:3, score:4, score:5, score:6, score:7 and 4 more (12 tasks): "
        "not run: a task it depends on failed",
        "  summarize: not run: a task it depends on failed (score)",
    ]
    assert progress.stage_counts()["generate"]["failed"] == 13


# ---------------------------------------------------------------------------
# The live view of a run
# ---------------------------------------------------------------------------

from stages.progress.activity import MAX_PENDING_FAILURES, Activity, StepFailure  # noqa: E402
from stages.progress.live_view import StageCount, StepCount, estimate_eta  # noqa: E402

PROGRESS_LINE = re.compile(
    r"^progress: (generated \d+/\d+( \(\d+ failed\))?, )?(scored \d+/\d+( \(\d+ failed\))?, steps passed \d+/\d+( \(\d+\.\d%\))?, )?"
    r"(steps generated \d+/\d+, )?(model calls \d+, )?(test processes \d+, )?elapsed \d\d:\d\d, ETA (\d\d:\d\d|--:--)$"
)


class TtyStream(io.StringIO):
    def isatty(self) -> bool:
        return True


def live_progress(
    clock: FakeClock,
    *selected: str,
    problems: int = 3,
    stream: io.StringIO | None = None,
    columns: int = 80,
) -> tuple[RunProgress, io.StringIO, Activity]:
    """A `RunProgress` after doit's `initialize`, with its own activity record, on a terminal of `columns` when the
    stream is one; the ticker never fires by itself."""
    activity = Activity()
    activity.set_problems(problems)
    stream = stream if stream is not None else io.StringIO()
    progress = RunProgress(io.StringIO(), {}, stream=stream, clock=clock, activity=activity, columns=lambda: columns)
    progress.tick_s = 3600.0
    progress.initialize({}, list(selected or ("summarize",)))
    return progress, stream, activity


def test_eta_is_computed_per_phase_from_executed_work_only() -> None:
    assert estimate_eta((StageCount(0, 0, 4, working_s=10.0),)) is None  # nothing executed yet
    # generation: 2 left at 1 per 10 s (one was up to date); scoring: 3 left at 1 per 2 s. The longer phase wins.
    assert StageCount(2, 1, 4, working_s=10.0).eta_s == 20.0
    assert estimate_eta((StageCount(2, 1, 4, working_s=10.0), StageCount(1, 1, 4, working_s=2.0))) == 20.0
    # a phase with work left and no rate yet: unknown, not a guess from the other phase
    assert estimate_eta((StageCount(2, 1, 4, working_s=10.0), StageCount(0, 0, 4))) is None
    assert estimate_eta((StageCount(4, 0, 4),)) == 0.0  # everything up to date
    assert estimate_eta((StageCount(4, 4, 4, working_s=9.0), StageCount(3, 3, 4, working_s=6.0))) == 2.0


def test_progress_and_eta_count_the_steps_of_generation() -> None:
    """Two long problems of 7 steps each (issue 32: `generated 0/2 ... ETA --:--` for minutes): the line counts
    the steps answered, and the ETA runs from the rate steps are asked, before any problem ends."""
    clock = FakeClock()
    progress, _, activity = live_progress(clock, "generate", problems=2)
    activity.set_steps_to_generate(14)
    tasks = [make_task(f"generate:{i}") for i in range(2)]
    for task in tasks:
        progress.get_status(task)
        progress.execute_task(task)
    clock.now += 30
    for step in ("1", "2", "3"):
        activity.add_generated_step("0", 0, f"0.{step}", asked=True)
    activity.add_generated_step("1", 0, "1.1", asked=False)  # found from an earlier run: no time of this run
    activity.add_generated_step("1", 0, "1.1", asked=False)  # counted once
    text = progress.live_status().text()
    # 10 steps left at one step asked per 10 s
    assert text == "generated 0/2, steps generated 4/14, model calls 0, elapsed 00:30, ETA 01:40", text
    assert PROGRESS_LINE.match("progress: " + text)
    assert progress.live_status().fitted(50).text == "gen 0/2, steps 4/14, elapsed 00:30, ETA 01:40"
    progress.complete_run()
    # a step of a problem whose generation failed is not counted; without steps, problems set the ETA as before
    assert StageCount(0, 0, 2, working_s=30.0, steps=StepCount(4, 14, 3)).eta_s == 100.0
    assert StageCount(0, 0, 2, working_s=30.0, steps=StepCount(1, 14, 0)).eta_s is None
    assert StageCount(1, 1, 2, working_s=30.0).eta_s == 30.0


def test_a_run_is_one_live_line_every_few_seconds_when_not_a_terminal() -> None:
    clock = FakeClock()
    progress, stream, activity = live_progress(clock)
    generate = [make_task(f"generate:{i}") for i in range(3)]
    score = [make_task(f"score:{i}") for i in range(3)]
    for task in generate:
        progress.get_status(task)
        progress.execute_task(task)
    clock.now += 4
    with activity.busy("model_calls"), activity.busy("model_calls"):
        progress.add_success(generate[0])
    assert lines_of(stream) == [
        "progress: generated 1/3, scored 0/3, steps passed 0/0, model calls 2, test processes 0, elapsed 00:04, ETA --:--"
    ]  # no problem scored yet: the scoring phase has no rate, so the ETA is not guessed

    clock.now += 1  # scoring of problem 0 starts while problems 1 and 2 are still being generated
    progress.get_status(score[0])
    progress.execute_task(score[0])
    clock.now += 1
    activity.add_scored("0", 2, 3)
    progress.add_success(score[0])
    assert len(lines_of(stream)) == 1  # changed, but within LinePace.interval_s of the last line

    clock.now += 4
    progress.add_failure(generate[1], TaskFailed("RunAborted: the model is gone"))
    assert lines_of(stream)[1:] == [
        "FAILED generate:1: RunAborted: the model is gone",
        "progress: generated 1/3 (1 failed), scored 1/3, steps passed 2/3 (66.7%), model calls 0, test processes 0, "
        "elapsed 00:10, ETA 00:10",
    ]
    assert not any(" done, " in line for line in lines_of(stream))  # no per-stage lines for the live stages

    clock.now += 40
    progress._refresh_live()  # what the ticker does: nothing changed for 30 s, so one heartbeat line
    progress._refresh_live()
    assert len(lines_of(stream)) == 4 and "elapsed 00:50" in lines_of(stream)[-1]

    progress.add_success(generate[2])
    for task in score[1:]:
        progress.get_status(task)
        progress.skip_uptodate(task)
    activity.add_scored("1", 1, 1)
    progress.complete_run()
    output = lines_of(stream)
    final = output.index("== run finished [00:50] ==")
    assert output[final - 1] == (
        "progress: generated 2/3 (1 failed), scored 3/3, steps passed 3/4 (75.0%), model calls 0, "
        "test processes 0, elapsed 00:50, ETA 00:00"
    )
    assert output[final + 1 : final + 3] == [
        "generate   2/3 done, 0 up-to-date, 1 failed  [00:50]",
        "score      1/3 done, 2 up-to-date, 0 failed  [00:45]",
    ]
    assert all(PROGRESS_LINE.match(line) for line in output if line.startswith("progress: "))


def test_the_live_view_shows_the_stages_the_command_runs() -> None:
    clock = FakeClock()
    one, _, _ = live_progress(clock, "generate:10", problems=15)
    task = make_task("generate:10")
    one.get_status(task)
    one.execute_task(task)
    text = one.live_status().text()
    assert text.startswith("generated 0/1, model calls 0, elapsed") and "scored" not in text

    rescore, _, _ = live_progress(clock, "score", problems=15)
    task = make_task("score:10")
    rescore.get_status(task)
    rescore.execute_task(task)
    text = rescore.live_status().text()
    assert text.startswith("scored 0/15, steps passed 0/0, test processes 0, elapsed") and "generated" not in text

    select_only, stream, _ = live_progress(clock, "select")
    run_ok(select_only, make_task("select"))
    select_only._refresh_live()
    select_only.complete_run()
    assert not any(line.startswith("progress: ") for line in lines_of(stream))


def test_on_a_terminal_the_live_view_is_one_bar_under_the_lines() -> None:
    clock = FakeClock()
    progress, stream, activity = live_progress(clock, stream=TtyStream())
    tasks = [make_task(f"generate:{i}") for i in range(3)]
    for task in tasks:
        progress.get_status(task)
        progress.execute_task(task)
    clock.now += 2
    progress.add_success(tasks[0])
    clock.now += 1
    progress.add_failure(tasks[1], TaskFailed("ModelCallError: HTTP 500"))
    text = stream.getvalue()
    assert "| gen 1/3, scored 0/3, passed 0/0, elapsed 00:02, ETA --:--" in text  # fitted to 80 columns
    assert "\r" in text and "progress: " not in text  # redrawn in place, not printed as lines
    failure = text.index("FAILED generate:1: ModelCallError: HTTP 500\n")
    assert "gen 1/3 (1 failed)" in text[failure:]  # the bar is drawn again under the failure line
    progress.complete_run()
    output = lines_of(stream)
    end = output.index("== run finished [00:03] ==")
    assert output[end - 1].endswith(
        "progress: generated 1/3 (1 failed), scored 0/3, steps passed 0/0, model calls 0, "
        "test processes 0, elapsed 00:03, ETA --:--"
    )  # the bar's last state, kept
    assert output[end + 1] == "generate   1/3 done, 0 up-to-date, 1 failed, 1 running  [00:03]"


def test_the_ticker_refreshes_the_view_between_task_events() -> None:
    clock = FakeClock()
    activity = Activity()
    stream = io.StringIO()
    progress = RunProgress(io.StringIO(), {}, stream=stream, clock=clock, activity=activity)
    progress.tick_s = 0.01
    progress.initialize({}, ["summarize"])
    task = make_task("generate:1")
    progress.get_status(task)
    progress.execute_task(task)
    clock.now += 31
    deadline = time.monotonic() + 10
    while not lines_of(stream):
        assert time.monotonic() < deadline, "the ticker never refreshed the live view"
        time.sleep(0.01)
    assert lines_of(stream)[0].startswith("progress: generated 0/1, scored 0/1")
    progress.complete_run()


def test_the_bar_gives_way_to_a_line_once_every_problem_task_finished() -> None:
    clock = FakeClock()
    progress, stream, _ = live_progress(clock, "generate", problems=2, stream=TtyStream())
    tasks = [make_task(f"generate:{i}") for i in range(2)]
    for task in tasks:
        progress.get_status(task)
        progress.execute_task(task)
    clock.now += 2
    progress.add_success(tasks[0])
    assert progress._live is not None and progress._live.bar_shown
    progress.add_success(tasks[1])
    assert not progress._live.bar_shown  # whatever runs next (the summary) prints on a clean line
    progress._refresh_live()
    output = lines_of(stream)
    assert output[-1].endswith("progress: generated 2/2, model calls 0, elapsed 00:02, ETA 00:00")
    assert sum("progress: " in line for line in output) == 1
    progress.complete_run()
    assert sum("progress: " in line for line in lines_of(stream)) == 1


def test_a_generation_that_ended_in_error_is_never_counted_as_generated() -> None:
    """Every model call failed: the generate tasks finished (their errors are recorded for the rerun), yet the view
    says none was generated."""
    clock = FakeClock()
    progress, stream, activity = live_progress(clock, problems=3)
    tasks = [make_task(f"generate:{i}") for i in range(3)]
    for index, task in enumerate(tasks):
        progress.get_status(task)
        progress.execute_task(task)
        activity.add_generation_failure(str(index))
        progress.add_success(task)
    text = progress.live_status().text()
    assert text.startswith("generated 0/3 (3 failed), scored 0/3") and "generated 3/3" not in stream.getvalue()
    progress.complete_run()
    assert "generate   3/3 done, 0 up-to-date, 0 failed (3 done with a generation error)  [00:00]" in lines_of(stream)
    assert StageCount(3, 3, 3, failed=3).text("generated") == "generated 0/3 (3 failed)"
    assert StageCount(2, 2, 3).text("generated") == "generated 2/3"


# ---------------------------------------------------------------------------
# Failed steps, printed as their verdicts are known
# ---------------------------------------------------------------------------


def test_a_failed_step_is_printed_once_when_published_neutralised_and_on_one_line() -> None:
    clock = FakeClock()
    progress, stream, activity = live_progress(clock, "score")
    task = make_task("score:10")
    progress.get_status(task)
    progress.execute_task(task)
    hostile = f"test 2 raised AssertionError: {ESCAPES}\nTraceback (most recent call last):\n{FAKE_TABLE}\ud800" * 20
    activity.add_step_failure(StepFailure("10", 0, ("10.2",), "timeout", "ran past step_timeout_seconds=30"))
    activity.add_step_failure(StepFailure("10", 0, ("10.3",), "fail", hostile))
    activity.add_step_failure(StepFailure("10", 1, ("10.3",), "fail", "wrong value"))  # attempt 1
    activity.add_step_failure(StepFailure("10", 0, ("10.2", "10.4", "10.5"), "fail", "not generated: HTTP 500"))
    activity.add_step_failure(StepFailure("11", 0, ("11.1", "11.2"), "fail", "not generated: HTTP 500"))
    progress._refresh_live()  # what the ticker does every tick_s, while the problem's other steps still run
    progress._refresh_live()
    activity.add_step_failure(StepFailure("10", 0, ("10.3",), "fail", "the same step again"))  # never twice
    progress.add_success(task)
    progress.complete_run()
    lines = [line for line in lines_of(stream) if line.startswith("step")]
    assert lines[0] == "step 10.2 timeout: ran past step_timeout_seconds=30"
    assert lines[1].startswith("step 10.3 fail: test 2 raised AssertionError: \\x1b[1A\\x1b[2K- 78.2 (pass)")
    assert len(lines[1]) < 240 and lines[1].endswith("...")  # one bounded line of reason
    assert lines[2:] == [
        "step 10.3@1 fail: wrong value",
        "steps 10.4, 10.5 fail: not generated: HTTP 500",
        "steps 11.1, 11.2 fail: same reason as step 10.4",  # one outage, many problems: the reason once
    ]
    output = stream.getvalue()
    assert "\x1b" not in output and "\x07" not in output and "\x9b" not in output and "\ud800" not in output
    assert output.index("step 10.2 timeout") < output.index("== run finished")


def test_failed_steps_beyond_what_is_kept_are_counted_not_lost() -> None:
    clock = FakeClock()
    progress, stream, activity = live_progress(clock, "score")
    for index in range(MAX_PENDING_FAILURES + 3):
        activity.add_step_failure(StepFailure("70", 0, (f"70.{index}",), "fail", "wrong"))
    progress.complete_run()
    lines = lines_of(stream)
    assert sum(line.startswith("step 70.") for line in lines) == MAX_PENDING_FAILURES
    assert "3 more failed step(s) not printed (see the details files)" in lines


def test_step_failure_lines_read_status_step_and_reason() -> None:
    assert step_failure_line(StepFailure("4", 0, ("4.1",), "parse_error", "no code")) == "step 4.1 parse_error: no code"
    assert step_failure_line(StepFailure("4", 2, ("4.1", "4.2"), "fail", "x")) == "steps 4.1@2, 4.2@2 fail: x"
