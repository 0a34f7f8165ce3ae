"""No process that runs model code outlives doit, however doit dies: a real doit run whose model asks for a tool
snippet that never ends (`while True: pass`), killed with SIGKILL while the snippet runs."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from stages.generate.server import ModelReply, ToolCallSpec
from tests.support.pipeline_support import (
    ScriptedModel,
    command_line,
    data_args,
    descendants,
    model_args,
    running,
    start_doit,
    steps_of,
)

ENDLESS_SNIPPET = "while True:\n    pass\n"


def endless_tool_call() -> ModelReply:
    arguments = json.dumps({"code": ENDLESS_SNIPPET})
    return ModelReply(tool_calls=(ToolCallSpec("call_1", "code_interpreter", arguments),), finish_reason="tool_calls")


def working_directory(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def snippet_processes(pids: set[int], code_workdir: Path) -> set[int]:
    """The processes among `pids` that run in a snippet's scratch folder (the snippet and its launchers)."""
    return {pid for pid in pids if working_directory(pid).startswith(str(code_workdir))}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to follow the snippet's processes")
def test_sigkill_of_doit_during_a_tool_snippet_leaves_no_process_running(
    workdir: Path, staged_data_dir: Path, dev_targets: Path, start_server
) -> None:
    steps = steps_of(staged_data_dir, ("4",), "validation")
    model = ScriptedModel(steps, {"4.1": endless_tool_call()})
    code_workdir = workdir / "snippets"
    args = (
        *data_args(staged_data_dir, dev_targets),
        *model_args(start_server(model)),
        "split=validation",
        "sample_ids=4",
        "mode=tool_use",
        "code_timeout_seconds=600",
        f"code_workdir={code_workdir}",
    )
    process = start_doit(workdir, *args)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while not (model.asked and snippet_processes(seen, code_workdir)):  # after the preflight's own probes
            assert process.poll() is None, f"doit ended before the snippet ran: {process.communicate()}"
            assert time.monotonic() < deadline, "the snippet never started"
            seen |= descendants(process.pid)
            time.sleep(0.05)
        snippets = snippet_processes(seen, code_workdir)
        time.sleep(1.0)  # the snippet is in its endless loop
        seen |= descendants(process.pid)
        assert running(snippets), "the snippet ended before doit was killed"
        process.kill()
        process.communicate(timeout=30)
        assert process.returncode == -signal.SIGKILL
        deadline = time.monotonic() + 30  # the kernel tears the namespaces down; slow on a loaded machine
        while running(seen) and time.monotonic() < deadline:
            time.sleep(0.1)
        survivors = {pid: command_line(pid) for pid in running(seen)}
        assert snippets and not survivors, f"processes left running after SIGKILL of doit: {survivors}"
    finally:
        for pid in running(seen):
            os.kill(pid, signal.SIGKILL)
