"""Units of the run conditions: memory-limit setting, one list of secret markers, tool-outcome counts, the run
lock, the live-process registry behind a prompt stop, per-selection summary names, one-line write failures."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from stages.config.settings import ConfigError, load_settings
from stages.execution import isolation, live_processes, redaction
from stages.execution.isolation import Limits, run_isolated, scrubbed_environment
from stages.pipeline.runlock import RunLock, RunLocked
from stages.pipeline.wiring import guarded
from stages.records.run_conditions import (
    conditions_markdown,
    generation_tool_outcomes,
    sandbox_failure_line,
    tool_outcome_counts,
)
from stages.storage.artifacts import atomic_write_text
from tests.support.run_artifacts import json_object


@pytest.fixture(autouse=True)
def fresh_registry():
    live_processes.reset()
    yield
    live_processes.reset()


def settings(**values: str):
    return load_settings({"model": "m", "split": "all", **values})


# ---------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------


def test_sandbox_memory_limit_zero_means_no_limit() -> None:
    assert settings(sandbox_memory_limit_mb="0").sandbox_memory_limit_mb == 0
    assert settings(sandbox_memory_limit_mb="16").sandbox_memory_limit_mb == 16
    for bad in ("8", "-1", "1.5", "lots"):
        with pytest.raises(ConfigError, match=r"sandbox_memory_limit_mb=.*0 \(no limit\) or a whole number >= 16"):
            settings(sandbox_memory_limit_mb=bad)


def test_one_list_of_secret_markers_for_files_and_environments(monkeypatch) -> None:
    assert vars(isolation)["is_secret_name"] is redaction.is_secret_name  # the function isolation reads
    params = '{"api_credential": "c1", "temperature": 0, "extra_body": {"auth_token": "t1", "top_k": 5}}'
    redacted = settings(model_params=params).redacted()["model_params"]
    assert redacted == {
        "api_credential": "<redacted>",
        "temperature": 0,
        "extra_body": {"auth_token": "<redacted>", "top_k": 5},
    }
    for name in ("API_CREDENTIAL", "MY_PASSWD", "GITHUB_AUTH", "OPENAI_API_KEY", "HF_TOKEN"):
        assert redaction.is_secret_name(name)
        with pytest.raises(ValueError, match="secret-looking"):
            scrubbed_environment({name: "x"})


def test_summary_tag_names_a_selection_other_than_the_whole_split() -> None:
    assert settings().summary_tag == "" and settings().run_paths.summary_json.name == "summary.json"
    subset = settings(sample_ids="1,3")
    assert subset.summary_tag == "ids-1_3"
    assert (subset.run_paths.summary_md.name, subset.run_paths.plots_dir.name) == (
        "summary-ids-1_3.md",
        "plots-ids-1_3",
    )
    assert settings(attempts="3").run_paths.summary_json.name == "summary-k3.json"
    assert settings(category="unclassified").summary_tag == "cat-unclassified"
    many = settings(sample_ids=",".join(str(n) for n in range(1, 40))).summary_tag
    assert many.startswith("ids-39-") and len(many) < 30


# ---------------------------------------------------------------------------
# Tool outcomes
# ---------------------------------------------------------------------------


def generation(*step_statuses: tuple[str, list[str]]) -> dict:
    return {
        "steps": [
            {"step_id": step_id, "trajectory": {"tool_results": [{"status": s} for s in statuses]}}
            for step_id, statuses in step_statuses
        ]
    }


def test_tool_outcomes_are_counted_per_step_and_in_total() -> None:
    assert tool_outcome_counts([{"status": "ok"}, {"status": "timeout"}, {"status": "ok"}]) == {
        "ok": 2,
        "error": 0,
        "timeout": 1,
        "sandbox_error": 0,
    }
    record = generation(("1.1", ["ok", "sandbox_error"]), ("1.2", []), ("1.3", ["error"]))
    outcomes = generation_tool_outcomes(record)
    assert outcomes["total"] == {"ok": 1, "error": 1, "timeout": 0, "sandbox_error": 1}
    assert sorted(json_object(outcomes["steps"])) == ["1.1", "1.3"]
    assert generation_tool_outcomes(None)["total"] == {"ok": 0, "error": 0, "timeout": 0, "sandbox_error": 0}


def test_a_run_fails_when_most_tool_calls_failed_in_the_sandbox() -> None:
    assert sandbox_failure_line({"ok": 2, "sandbox_error": 2}) is None  # half is not most
    assert sandbox_failure_line({"ok": 0, "error": 0, "timeout": 0, "sandbox_error": 0}) is None
    line = sandbox_failure_line({"ok": 1, "sandbox_error": 3, "total": 4})
    assert line is not None and line.startswith("3 of 4 tool calls failed in the code sandbox")
    markdown = "\n".join(
        conditions_markdown({"ok": 1, "error": 0, "timeout": 0, "sandbox_error": 3}, ["77.1"], "tool_use")
    )
    assert "## Tool calls" not in markdown  # the counts themselves are in the summary's Tool use section
    assert "**Warning: 3 of 4 tool calls failed" in markdown and "1 scored step(s) could not be scored" in markdown
    assert conditions_markdown({"ok": 0}, [], "naive") == []


# ---------------------------------------------------------------------------
# The run lock
# ---------------------------------------------------------------------------

HOLD_LOCK = """
import sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from stages.pipeline.runlock import RunLock
lock = RunLock(Path({path!r})).acquire()
print("held", flush=True)
time.sleep(60)
"""


def hold_lock_in_another_process(path: Path) -> subprocess.Popen[str]:
    root = str(Path(__file__).resolve().parents[2])
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK.format(root=root, path=str(path))], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def test_the_lock_names_its_live_holder_and_is_taken_over_when_it_dies(tmp_path: Path) -> None:
    path = tmp_path / "run" / ".lock"
    holder = hold_lock_in_another_process(path)
    try:
        with pytest.raises(RunLocked, match=rf"is in use by another run \(pid {holder.pid} on "):
            RunLock(path).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert path.exists()  # left behind by the killed holder
    lock = RunLock(path).acquire()
    assert f'"pid": {os.getpid()}' in path.read_text()
    lock.release()
    assert not path.exists()


# ---------------------------------------------------------------------------
# The prompt stop
# ---------------------------------------------------------------------------


def running_in_group(pgid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def test_abort_all_kills_a_running_child_group_and_nothing_is_saved_after(tmp_path: Path) -> None:
    outcome: list[BaseException | object] = []
    code = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"

    def run() -> None:
        try:
            outcome.append(
                run_isolated(
                    [sys.executable, "-c", code],
                    cwd=tmp_path,
                    env=scrubbed_environment(),
                    limits=Limits(timeout_seconds=120),
                )
            )
        except live_processes.RunInterrupted as error:
            outcome.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 30
    while not live_processes.live():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    [pid] = live_processes.live()
    time.sleep(0.5)  # the grandchild `sleep` is running in the same group
    started = time.monotonic()
    assert live_processes.abort_all() == 1
    worker.join(timeout=10)
    assert time.monotonic() - started < 2
    assert isinstance(outcome[0], live_processes.RunInterrupted)
    time.sleep(0.2)
    assert running_in_group(pid) == []  # the whole group is gone (at most zombies wait for their reaper)
    assert live_processes.live() == set()
    with pytest.raises(live_processes.RunInterrupted):
        atomic_write_text(tmp_path / "x.json", "{}")


def test_a_child_registered_after_the_stop_is_killed_at_once(tmp_path: Path) -> None:
    live_processes.abort_all()
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    live_processes.register(process.pid)
    assert process.wait(timeout=5) == -signal.SIGKILL


# ---------------------------------------------------------------------------
# Unwritable folders
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_an_unwritable_folder_is_a_one_line_task_failure(code: int) -> None:
    def write() -> None:
        raise OSError(code, os.strerror(code), "results/scicode/m/run/details/1.json")

    failure = guarded(write)()
    assert failure is not None
    message = str(failure.message)
    assert message.startswith("cannot write results/scicode/m/run/details/1.json: ") and "\n" not in message


def test_the_pipelines_own_task_error_is_its_message_without_the_class_name() -> None:
    from stages.export.stage import ExportError

    def export() -> None:
        raise ExportError("cannot export results/scicode/m/run: no selection.json (run `doit select` first)")

    failure = guarded(export)()
    assert failure is not None
    assert str(failure.message) == "cannot export results/scicode/m/run: no selection.json (run `doit select` first)"


def test_skip_reasons_name_readme_sections_that_exist() -> None:
    import re

    root = Path(__file__).resolve().parents[2]
    sections = {
        line[3:].strip()
        for line in (root / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("## ")
    }
    named = set(re.findall(r"see README: ([^)\"']+)\)", (root / "tests" / "conftest.py").read_text(encoding="utf-8")))
    assert named and named <= sections, (named, sections)
