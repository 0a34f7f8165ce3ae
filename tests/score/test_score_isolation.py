"""Isolation of test processes: timeouts kill every descendant, memory limit, bounded and decoded output,
syntax errors, the zygote fallback, and prefilled classes usable by later steps."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from stages.execution import live_processes
from stages.score.parent import launcher
from stages.score.parent.engine import OUTPUT_LIMIT_BYTES, execute_step
from stages.score.parent.script import build_step_script
from stages.score.shared.zygote import SPARES_PER_ROLE
from tests.score.score_helpers import make_job, problem, run_code, shared_data_paths
from tests.support.process_scan import assert_no_process_with, processes_with, unique_sleep_seconds

TENSOR = "def tensor(*args):\n    M = 1\n    for a in args:\n        M = np.kron(M, a)\n    return M\n"


@pytest.mark.parametrize("use_zygote", [True, False])
def test_timeout_kills_every_descendant(shared_scicode: Path, use_zygote: bool) -> None:
    marker = unique_sleep_seconds()
    deps = (
        "import numpy as np\nimport subprocess\n"
        f"_sleeper = subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
    )
    code = "def tensor(*args):\n    while True:\n        pass\n"
    prob = problem(shared_scicode, "19")
    launcher.zygote_for(sys.executable)  # started before the clock: the limit is on the step, not on the zygote
    started = time.monotonic()
    verdict = execute_step(
        make_job(shared_scicode, prob, "19.1", {"19.1": code}, timeout=3, deps=deps, use_zygote=use_zygote)
    )
    assert verdict.status == "timeout", verdict.reason
    assert time.monotonic() - started < 20
    assert verdict.launch_mode == ("zygote" if use_zygote else "fresh")
    assert_no_process_with(marker)


def test_memory_limit(shared_scicode: Path) -> None:
    code = TENSOR.replace("return M", "_hog = np.ones(2 ** 33)\n    return M")
    verdict = run_code(shared_scicode, "19", "19.1", code, memory_mb=4096)
    assert verdict.status == "fail"
    assert "MemoryError" in verdict.reason or "Unable to allocate" in verdict.reason, verdict.reason


def test_invalid_utf8_and_huge_output_are_kept_bounded(shared_scicode: Path) -> None:
    code = TENSOR.replace(
        "return M",
        "import sys\n    sys.stdout.buffer.write(b'\\xff\\xfe bad bytes ' * 200000)\n"
        "    sys.stdout.flush()\n    sys.stderr.write('x' * 300000)\n    return M",
    )
    verdict = run_code(shared_scicode, "19", "19.1", code)
    assert verdict.status == "pass", verdict.reason
    assert "\ufffd" in verdict.stdout
    assert "output truncated" in verdict.stdout and "output truncated" in verdict.stderr
    assert len(verdict.stdout.encode("utf-8")) < 4 * OUTPUT_LIMIT_BYTES


def test_syntax_error_fails_with_its_reason(shared_scicode: Path) -> None:
    verdict = run_code(shared_scicode, "19", "19.1", "def tensor(*args:\n    return 1\n")
    assert verdict.status == "fail"
    assert "syntax error in step 19.1 code" in verdict.reason


def test_error_in_code_fails(shared_scicode: Path) -> None:
    verdict = run_code(shared_scicode, "19", "19.1", TENSOR + "1 / 0\n")
    assert verdict.status == "fail" and "ZeroDivisionError" in verdict.reason


def test_fresh_process_fallback_when_the_zygote_dies(shared_scicode: Path) -> None:
    client = launcher.zygote_for(sys.executable)
    assert client is not None and client.alive
    assert run_code(shared_scicode, "19", "19.1", TENSOR).launch_mode == "zygote"
    assert client._process is not None  # noqa: SLF001
    launcher.kill_group(client._process.pid)  # noqa: SLF001 - simulate a crash
    deadline = time.monotonic() + 5
    while client.alive and time.monotonic() < deadline:
        time.sleep(0.05)
    verdict = run_code(shared_scicode, "19", "19.1", TENSOR)
    assert verdict.status == "pass" and verdict.launch_mode == "fresh"
    launcher.stop_zygotes()  # later tests start a new zygote
    assert run_code(shared_scicode, "19", "19.1", TENSOR).launch_mode == "zygote"


def test_prefilled_class_is_usable_by_later_steps(shared_scicode: Path) -> None:
    prob = problem(shared_scicode, "13", "test")
    index = next(i for i, step in enumerate(prob.steps) if step.step_id == "13.7")
    script = build_step_script(
        prob,
        index,
        {s.step_id: None for s in prob.steps} | {"13.7": "def probe():\n    return 1\n"},
        shared_data_paths(shared_scicode),
        "full",
    )
    official = (shared_scicode / "13.6.txt").read_text(encoding="utf-8")
    assert any(section.code == official for section in script.sections)
    test = "maxwell = Maxwell(10, 1.0)\nassert maxwell.n_grid == 10 and maxwell.n_vars == 7 and probe() == 1\n"
    job = make_job(
        shared_scicode,
        prob,
        "13.7",
        {s.step_id: None for s in prob.steps} | {"13.7": "def probe():\n    return 1\n"},
        tests=(test,),
    )
    verdict = execute_step(job)
    assert verdict.status == "pass", (verdict.reason, verdict.stderr[-1500:])


def test_a_zygote_that_dies_takes_its_running_steps_with_it(shared_scicode: Path) -> None:
    client = launcher.zygote_for(sys.executable)
    assert client is not None and client.alive
    marker = unique_sleep_seconds()
    deps = f"import numpy as np\nimport subprocess\n_sleeper = subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
    prob = problem(shared_scicode, "19")
    job = make_job(
        shared_scicode,
        prob,
        "19.1",
        {"19.1": "def tensor(*args):\n    while True:\n        pass\n"},
        timeout=120,
        deps=deps,
    )
    verdicts = []
    worker = threading.Thread(target=lambda: verdicts.append(execute_step(job)))
    worker.start()
    deadline = time.monotonic() + 60
    while not processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(marker), "the step never started"
    assert client._process is not None  # noqa: SLF001
    os.kill(client._process.pid, signal.SIGKILL)  # noqa: SLF001 - the zygote crashes mid-step
    worker.join(timeout=60)
    assert verdicts and verdicts[0].status != "pass"
    assert_no_process_with(marker)
    launcher.stop_zygotes()


def test_a_zygote_started_in_the_background_never_blocks_its_caller() -> None:
    """A streaming run starts the zygote from a generation thread: the caller goes on at once even while another
    zygote holds the start lock, and the zygote is ready when the first step asks for it."""
    launcher.stop_zygotes()
    launcher._STARTED_IN_BACKGROUND.discard(sys.executable)
    with launcher._ZYGOTES_LOCK:  # as while some zygote is starting
        started = time.monotonic()
        launcher.start_zygote_in_background(sys.executable)
        launcher.start_zygote_in_background(sys.executable)  # once per process: the second call does nothing
        assert time.monotonic() - started < 1.0
        assert [t.name for t in threading.enumerate()].count("zygote-start") == 1
    deadline = time.monotonic() + 60
    while not (sys.executable in launcher._ZYGOTES and launcher._ZYGOTES[sys.executable] is not None):
        assert time.monotonic() < deadline, "the background zygote never started"
        time.sleep(0.05)
    client = launcher.zygote_for(sys.executable)
    assert client is not None and client.alive and client.versions


def _spares_of(client: launcher.ZygoteClient, count: int) -> set[int]:
    """The zygote's spare processes once it has forked `count` of them (they are stopped with the run)."""
    deadline = time.monotonic() + 30
    while len(client._spares) < count and time.monotonic() < deadline:  # noqa: SLF001 - what the engine knows
        time.sleep(0.05)
    spares = set(client._spares)  # noqa: SLF001
    assert len(spares) >= count, spares
    assert spares <= live_processes.live()  # a Ctrl-C kills them with the steps
    return spares


def test_steps_run_in_spares_and_a_spare_that_dies_unused_is_replaced(shared_scicode: Path) -> None:
    """The zygote forks each role's processes ahead of their steps; a step is handed to one of them. One that dies
    before it had a step is forgotten (the engine unregisters it) and the steps go on, in new spares."""
    launcher.stop_zygotes()
    client = launcher.zygote_for(sys.executable)
    assert client is not None
    spares = _spares_of(client, 2 * SPARES_PER_ROLE)
    verdict = run_code(shared_scicode, "19", "19.1", TENSOR)
    assert verdict.status == "pass" and verdict.launch_mode == "zygote"
    used = spares - set(client._spares)  # noqa: SLF001
    assert len(used) == 2, used  # the checker's and the test process's, forked before the step was asked for
    for pid in set(client._spares):  # noqa: SLF001
        launcher.kill_group(pid)
    deadline = time.monotonic() + 10
    while set(client._spares) & spares and time.monotonic() < deadline:  # noqa: SLF001
        time.sleep(0.05)
    assert not set(client._spares) & spares  # noqa: SLF001 - the dead ones are forgotten
    assert not (spares - used) & live_processes.live()
    for _ in range(2):
        verdict = run_code(shared_scicode, "19", "19.1", TENSOR)
        assert verdict.status == "pass" and verdict.launch_mode == "zygote", verdict.reason
    assert client.alive
    launcher.stop_zygotes()
