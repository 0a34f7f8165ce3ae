"""Benchmark: where the fixed time of a trivial step goes.

Two views, both over --runs trivial steps (no targets; one `assert` test), with a pause between steps (--gap-ms)
so that the zygote has its spares ready, as it has between the steps of a run:

(a) the engine's timeline of `execute_step`: starting the checker and the test process (two zygote round trips,
    each handing a step to a spare), the conversation (the confined process's per-step set-up, the code, the test
    and the checker's judgement), waiting for the exit (the confined process's teardown, the supervising parent's
    report) and the engine's clean-up;
(b) each set-up phase of a confined process timed on its own in a fork of an interpreter that preloads what the
    zygote preloads, marked "ahead" where a spare does it before its step is known and "per step" where it cannot.

    python bench/step_breakdown.py [--runs N] [--gap-ms MS]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from stages.execution.confinement import check_confinement  # noqa: E402
from stages.score.checker.rewrite import imported_modules, rewrite_tests  # noqa: E402
from stages.score.parent import engine  # noqa: E402
from stages.score.parent.engine import StepJob, execute_step  # noqa: E402
from stages.score.parent.launcher import zygote_for  # noqa: E402
from stages.score.parent.limits import StepLimits  # noqa: E402
from stages.score.shared import child_runtime  # noqa: E402

DEPS = "import numpy as np"
TEST = "assert np.allclose(np.ones(2), 1)"
MEMORY_MB = 8192
SCRATCH_LIMIT_MB = 64


def bench_limits(timeout_seconds: float) -> StepLimits:
    """The limits a run of this interpreter gives its steps, with the bench's timeout and memory limit."""
    return StepLimits(sys.executable, timeout_seconds, MEMORY_MB, check_confinement("auto", sys.executable))


def trivial_job() -> StepJob:
    return StepJob(
        "0",
        "0.1",
        DEPS,
        (("step 0.1 code", "def f():\n    return 1\n"),),
        rewrite_tests((TEST,), DEPS),
        imported_modules([DEPS, TEST]),
        (),
        bench_limits(60.0),
        None,
    )


# ---------------------------------------------------------------------------
# (a) The engine's timeline
# ---------------------------------------------------------------------------


class Timeline:
    """Marks taken around the engine's own functions during one step."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, float]] = []

    def mark(self, name: str) -> None:
        self.marks.append((name, time.monotonic()))

    def wrap(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            self.mark(f"{label} start")
            try:
                return original(*args, **kwargs)
            finally:
                self.mark(f"{label} end")

        setattr(owner, name, timed)


def engine_timeline(runs: int, gap_seconds: float) -> dict[str, list[float]]:
    timeline = Timeline()
    timeline.wrap(engine, "_start", "start")
    timeline.wrap(engine, "_converse", "converse")
    timeline.wrap(engine.ScratchDir, "__exit__", "scratch removal")
    job = trivial_job()
    spans: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(runs):
        time.sleep(gap_seconds)
        timeline.marks.clear()
        started = time.monotonic()
        verdict = execute_step(job)
        ended = time.monotonic()
        assert verdict.status == "pass", verdict.reason
        at = dict(_numbered(timeline.marks))
        spans["start the checker (zygote round trip)"].append(at["start end#1"] - started)
        spans["start the test process (zygote round trip)"].append(at["start end#2"] - at["start start#2"])
        spans["conversation: set-up, code, test, judgement"].append(at["converse end#1"] - at["converse start#1"])
        spans["exit: teardown and the parent's report"].append(at["scratch removal start#1"] - at["converse end#1"])
        spans["clean-up: scratch, outputs, verdict"].append(ended - at["scratch removal start#1"])
        spans["TOTAL"].append(ended - started)
    return spans


def _numbered(marks: list[tuple[str, float]]) -> Iterator[tuple[str, float]]:
    seen: collections.Counter[str] = collections.Counter()
    for name, moment in marks:
        seen[name] += 1
        yield f"{name}#{seen[name]}", moment


# ---------------------------------------------------------------------------
# (b) The phases of a confined process, one by one
# ---------------------------------------------------------------------------

AHEAD = "ahead"
PER_STEP = "per step"


def confined_phases(runs: int, gap_seconds: float) -> dict[str, list[float]]:
    """Each phase timed in a fork (A) of this interpreter and A's fork (B), as a test spare and its step do."""
    sys.path[:0] = [folder for folder in child_runtime.CHILD_FOLDERS if folder not in sys.path]
    child_runtime.preload()
    confine = child_runtime.confine_module()
    confine.prepare_seccomp(_seccomp_binding())
    read_paths = child_runtime.sandbox_read_paths()
    spans: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(runs):
        time.sleep(gap_seconds)
        for name, seconds in _one_confined_process(confine, read_paths):
            spans[name].append(seconds)
    return spans


def _seccomp_binding() -> str | None:
    from stages.execution.confinement import binding_arguments

    arguments = binding_arguments()
    return arguments[1] if len(arguments) > 1 else None


def _one_confined_process(confine: Any, read_paths: list[str]) -> list[tuple[str, float]]:
    scratch = tempfile.mkdtemp(prefix="scicode-breakdown-")
    read_end, write_end = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _as_parent_a(confine, read_paths, scratch, write_end, started)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    ended = time.monotonic()
    os.rmdir(scratch)
    marks = [mark for line in b"".join(chunks).splitlines() for mark in json.loads(line)]
    marks.append([f"exit of the parent, reaped ({AHEAD}: reported before it)", ended])
    spans, previous = [], started
    for name, moment in marks:
        spans.append((name, moment - previous))
        previous = moment
    return spans


def _as_parent_a(confine: Any, read_paths: list[str], scratch: str, out: int, started: float) -> None:
    marks = [[f"fork of the zygote ({AHEAD})", time.monotonic()]]
    try:
        confine._STEP_CGROUP, confine._STEP_CGROUP_REASON = confine._name_step_cgroup()
        marks.append([f"name the memory cgroup, sweep stale ones ({AHEAD})", time.monotonic()])
        namespaces, _ = confine.unshare_namespaces()
        confine._SUPERVISED_NAMESPACES = namespaces
        marks.append([f"unshare the namespaces ({AHEAD})", time.monotonic()])
        child = os.fork()
        if child == 0:
            _as_confined_b(confine, read_paths, scratch, out, marks)
        os.waitpid(child, 0)
        ended = [[f"exit of the confined process ({PER_STEP})", time.monotonic()]]
        if confine._STEP_CGROUP is not None:
            confine.cgroups.remove(confine._STEP_CGROUP[1])
        ended.append([f"memory cgroup removed ({PER_STEP})", time.monotonic()])
        os.write(out, json.dumps(ended).encode() + b"\n")
    finally:
        os._exit(0)


def _as_confined_b(confine: Any, read_paths: list[str], scratch: str, out: int, marks: list[list[Any]]) -> None:
    kernel = confine.kernel
    phases: list[tuple[str, Callable[[], object]]] = [
        (f"fork of the confined process ({AHEAD})", lambda: None),
        (f"private mounts, task limit, memory cgroup joined ({AHEAD})", confine.prepare_namespace),
        (
            f"memory cgroup limit ({PER_STEP})",
            lambda: confine.join_step_cgroup(MEMORY_MB, SCRATCH_LIMIT_MB),
        ),
        (f"tmpfs scratch ({PER_STEP})", lambda: confine.mount_scratch(scratch, SCRATCH_LIMIT_MB)),
        (f"write folders owned ({PER_STEP})", lambda: confine.own_writable_folders([scratch])),
        (f"resource limits ({PER_STEP})", lambda: confine.apply_limits(MEMORY_MB, SCRATCH_LIMIT_MB)),
        (f"Landlock ({PER_STEP})", lambda: kernel.apply_landlock([*read_paths, scratch], [scratch], _abi(kernel))),
        (f"ids and capabilities ({PER_STEP})", kernel.drop_capabilities),
        (f"seccomp filter, built in the zygote ({PER_STEP})", kernel.install_seccomp),
    ]
    try:
        for name, phase in phases:
            phase()
            marks.append([name, time.monotonic()])
        os.write(out, json.dumps(marks).encode() + b"\n")
    finally:
        os._exit(0)


def _abi(kernel: Any) -> int:
    abi, _ = kernel.landlock_abi()
    return int(abi)


# ---------------------------------------------------------------------------


def show(title: str, spans: dict[str, list[float]]) -> None:
    print(title)
    for name, values in spans.items():
        print(f"  {name:58s} {statistics.median(values) * 1000:7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--gap-ms", type=float, default=100.0)
    options = parser.parse_args()
    gap = options.gap_ms / 1000
    zygote_for(sys.executable)
    time.sleep(1.0)  # the zygote forks its first spares
    show(f"(a) the engine's timeline of a trivial step (median of {options.runs})", engine_timeline(options.runs, gap))
    show(
        f"(b) the phases of a confined process, in a fork of a preloaded interpreter (median of {options.runs})",
        confined_phases(options.runs, gap),
    )


if __name__ == "__main__":
    main()
