"""A child started through stages.execution.spawning dies with the process that started it, and only then; the
snippet launcher enforces its own time bound."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from stages.execution.confinement import CONFINE_SCRIPT, binding_arguments
from stages.execution.confinement.confine import BACKSTOP_LINE
from stages.execution.spawning import popen_dying_with_this_process
from tests.support.pipeline_support import running

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def wait_until_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while running([pid]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not running([pid])


def test_a_child_dies_when_its_starter_is_killed(tmp_path: Path) -> None:
    starter = textwrap.dedent(
        """
        import sys, time
        from stages.execution.spawning import popen_dying_with_this_process
        child = popen_dying_with_this_process([sys.executable, "-c", "while True: pass"])
        print(child.pid, flush=True)
        time.sleep(600)
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", starter], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert process.stdout is not None
    child = int(process.stdout.readline())
    try:
        assert running([child])
        process.kill()
        process.wait(timeout=30)
        assert wait_until_gone(child, 10), "the child outlived the process that started it"
    finally:
        if running([child]):
            subprocess.run(["kill", "-9", str(child)], check=False)


def test_a_child_started_from_a_short_lived_thread_outlives_that_thread() -> None:
    started: list[subprocess.Popen[bytes]] = []
    thread = threading.Thread(
        target=lambda: started.append(
            popen_dying_with_this_process([sys.executable, "-c", "import time; time.sleep(60)"])
        )
    )
    thread.start()
    thread.join()
    child = started[0]
    try:
        time.sleep(0.5)
        assert child.poll() is None, "the child was killed when the thread that asked for it ended"
    finally:
        child.kill()
        child.wait()


def test_the_snippet_launcher_kills_its_program_at_its_own_time_bound(tmp_path: Path) -> None:
    began = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            str(CONFINE_SCRIPT),
            "--write",
            str(tmp_path),
            "--timeout-seconds",
            "1",
            *binding_arguments(),
            "--python",
            "--",
            "-c",
            "while True: pass",
        ],
        capture_output=True,
        timeout=60,
        check=False,
        start_new_session=True,
    )
    elapsed = time.monotonic() - began
    assert result.returncode == -9, result
    assert BACKSTOP_LINE.strip() in result.stderr.decode()
    assert elapsed < 20
