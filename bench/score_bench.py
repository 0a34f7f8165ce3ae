"""Benchmark: scoring the 50 validation reference steps with our engine vs. a plain official-style runner.

(a) engine: `stages.score.parent.engine.execute_step` per step (warm zygote, test process, checker, isolation:
    namespaces, the tmpfs scratch, Landlock, the seccomp filter), through the shared longest-first pool, no verdict cache;
(b) plain: one fresh `python script.py` per step, the official script (deps + reference code +
    `from scicode.parse.parse import process_hdf5_to_tuple` + targets + test cases), exit 0 = pass,
    steps in file order, same worker count;
(c) dask: the pipeline's `executor=dask` path (`stages.score.parent.dask_executor.DaskExecutor`) on a
    `distributed.LocalCluster` of --dask-workers worker processes (default 2): each step submitted
    with its expected duration as priority, targets read on the worker, `execute_step` there
    (skipped with --no-dask or when distributed is not installed).

All run in one invocation; with --repeat N the rounds are interleaved (the order rotates each round:
A B C, B C A, ...), because these machines drift by +-15 %. Also measures the fixed per-step overhead
of each on a trivial step (no targets), and dask's overhead per step over the local engine.

    python bench/score_bench.py [--workers N] [--dask-workers N] [--repeat N] [--trivial-runs N] [--no-dask]
                                [--data /path/to/shared/scicode]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from stages.benchmark.problems import load_split  # noqa: E402
from stages.benchmark.protocol import DEFAULT_CARRY  # noqa: E402
from stages.execution.confinement import check_confinement  # noqa: E402
from stages.execution.isolation import scrubbed_environment  # noqa: E402
from stages.execution.slots import PrioritySlots  # noqa: E402
from stages.score.checker.rewrite import imported_modules, rewrite_tests  # noqa: E402
from stages.score.parent.engine import StepJob, execute_step  # noqa: E402
from stages.score.parent.executor import StepRequest  # noqa: E402
from stages.score.parent.launcher import environment_versions, zygote_for  # noqa: E402
from stages.score.parent.limits import StepLimits  # noqa: E402
from stages.score.parent.script import StepScript, build_step_script  # noqa: E402
from stages.score.parent.stage import reference_seconds  # noqa: E402
from stages.score.parent.targets_io import load_step_targets  # noqa: E402
from stages.storage.paths import DataPaths  # noqa: E402

RUNTIME = PROJECT / "stages" / "score" / "shared" / "runtime"
TIMEOUT = 1800.0
MEMORY_MB = 8192


def bench_limits(timeout_seconds: float) -> StepLimits:
    """The limits a run of this interpreter gives its steps, with the bench's timeout and memory limit."""
    return StepLimits(sys.executable, timeout_seconds, MEMORY_MB, check_confinement("auto", sys.executable))


def reference_scripts(shared: Path) -> list[StepScript]:
    data_paths = DataPaths(shared.parent)
    scripts = []
    for problem in load_split(data_paths, "validation"):
        codes = {step.step_id: step.ground_truth_code for step in problem.steps}
        scripts.extend(
            build_step_script(problem, i, codes, data_paths, DEFAULT_CARRY)
            for i, step in enumerate(problem.steps)
            if not step.prefilled
        )
    return scripts


def engine_job(script: StepScript, targets: Path) -> StepJob:
    pickles = load_step_targets(targets, script.step_id, len(script.tests), sys.executable) if script.tests else []
    return StepJob(
        script.problem_id,
        script.step_id,
        script.deps,
        tuple((s.label, s.code) for s in script.sections),
        rewrite_tests(script.tests, script.deps),
        imported_modules([script.deps, *script.tests]),
        tuple(pickles),
        bench_limits(TIMEOUT),
        str(targets.resolve()),
    )


def run_engine(jobs: list[StepJob], workers: int, expected: dict[str, float]) -> tuple[float, int]:
    slots = PrioritySlots(workers)

    def one(job: StepJob) -> bool:
        with slots.slot(expected.get(job.step_id, 1.0)):
            verdict = execute_step(job)
        expected[job.step_id] = verdict.duration_s
        return verdict.status == "pass"

    return timed_passes(one, jobs, threads=len(jobs))


def timed_passes(run_one: Callable[[Any], bool], items: list[Any], threads: int) -> tuple[float, int]:
    """Wall time of running `run_one` over `items` on `threads` threads, and how many passed."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        passed = sum(pool.map(run_one, items))
    return time.monotonic() - started, passed


def dask_request(job: StepJob, expected: float) -> StepRequest:
    """What the score stage sends to an executor: the job without target values (the worker reads them)."""
    return StepRequest(
        dataclasses.replace(job, target_pickles=()),
        None,
        tuple(sorted(environment_versions(job.limits.python_binary).items())),
        expected,
    )


def warm_worker(python_binary: str) -> bool:
    """Start the worker's zygote (as its first step would), outside the timed runs."""
    from stages.score.parent.launcher import zygote_for as worker_zygote

    return worker_zygote(python_binary) is not None


def start_dask(workers: int) -> Any:
    from stages.score.parent.dask_executor import DaskExecutor

    executor = DaskExecutor("", workers)
    warmed = executor.client.run(warm_worker, sys.executable)
    assert all(warmed.values()), warmed
    return executor


def run_dask(executor: Any, jobs: list[StepJob], expected: dict[str, float]) -> tuple[float, int]:
    def one(job: StepJob) -> bool:
        verdict = executor.run(dask_request(job, expected.get(job.step_id, 1.0)))
        expected[job.step_id] = verdict.duration_s
        return verdict.status == "pass"

    return timed_passes(one, jobs, threads=len(jobs))


def run_plain_one(text: str) -> bool:
    with tempfile.TemporaryDirectory(prefix="scicode-plain-") as folder:
        path = Path(folder) / "script.py"
        path.write_text(text, encoding="utf-8")
        env = scrubbed_environment({"PYTHONPATH": str(RUNTIME)}, home=Path(folder))
        result = subprocess.run(
            [sys.executable, str(path)],
            cwd=folder,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=TIMEOUT,
            check=False,
        )
        return result.returncode == 0


def run_plain(texts: list[str], workers: int) -> tuple[float, int]:
    return timed_passes(run_plain_one, texts, threads=workers)


TRIVIAL = StepScript("0", "0.1", "import numpy as np", (), ("assert np.allclose(np.ones(2), 1)",))


def trivial_overheads(runs: int, dask: Any | None) -> dict[str, float]:
    """Median wall of one trivial step (no targets) per column, run one after another (no concurrency)."""
    job = StepJob(
        "0",
        "0.1",
        TRIVIAL.deps,
        (("step 0.1 code", "def f():\n    return 1\n"),),
        rewrite_tests(TRIVIAL.tests, TRIVIAL.deps),
        imported_modules([TRIVIAL.deps, *TRIVIAL.tests]),
        (),
        bench_limits(60.0),
        None,
    )
    plain_text = (
        "import numpy as np\n\ndef f():\n    return 1\n\nfrom scicode.parse.parse import process_hdf5_to_tuple\n\n"
        + TRIVIAL.tests[0]
        + "\n"
    )
    times: dict[str, list[float]] = {"engine": [], "plain": [], **({"dask": []} if dask is not None else {})}
    for _ in range(runs):
        started = time.monotonic()
        verdict = execute_step(job)
        times["engine"].append(time.monotonic() - started)
        assert verdict.status == "pass", verdict.reason
        started = time.monotonic()
        assert run_plain_one(plain_text)
        times["plain"].append(time.monotonic() - started)
        if dask is not None:
            started = time.monotonic()
            verdict = dask.run(dask_request(job, 1.0))
            times["dask"].append(time.monotonic() - started)
            assert verdict.status == "pass", verdict.reason
    return {name: statistics.median(values) for name, values in times.items()}


def dask_available() -> bool:
    from stages.score.parent.dask_executor import missing_dependency

    reason = missing_dependency()
    if reason is not None:
        print(f"dask column skipped: {reason}")
    return reason is None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--dask-workers", type=int, default=2)
    parser.add_argument("--no-dask", action="store_true", help="skip the dask column")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--trivial-runs", type=int, default=10)
    parser.add_argument("--data", type=Path, default=PROJECT.parent / "shared" / "scicode")
    options = parser.parse_args()
    targets = options.data / "test_data_dev.h5"
    scripts = reference_scripts(options.data)
    print(f"confinement of the engine's test processes: {check_confinement('auto', sys.executable)}")
    started = time.monotonic()
    zygote_for(sys.executable)
    print(f"zygote start (one-off): {time.monotonic() - started:.2f} s")
    dask = None
    if not options.no_dask and dask_available():
        started = time.monotonic()
        dask = start_dask(options.dask_workers)
        print(
            f"dask LocalCluster start, {options.dask_workers} workers with warm zygotes (one-off): "
            f"{time.monotonic() - started:.2f} s"
        )
    jobs = [engine_job(script, targets) for script in scripts]
    texts = [script.official_text(str(targets.resolve())) for script in scripts]
    columns = ["engine", "plain"] + (["dask"] if dask is not None else [])
    expected = {name: dict(reference_seconds()) for name in columns}
    walls: dict[str, list[float]] = {name: [] for name in columns}
    print(
        f"{len(scripts)} reference steps, {options.workers} local workers"
        + (f", {options.dask_workers} dask workers" if dask is not None else "")
        + f", {options.repeat} interleaved round(s)"
    )
    try:
        for round_index in range(options.repeat):
            shift = round_index % len(columns)
            for which in columns[shift:] + columns[:shift]:
                if which == "engine":
                    wall, passed = run_engine(jobs, options.workers, expected["engine"])
                elif which == "plain":
                    wall, passed = run_plain(texts, options.workers)
                else:
                    wall, passed = run_dask(dask, jobs, expected["dask"])
                walls[which].append(wall)
                print(f"  round {round_index + 1} {which:6s}: {wall:7.2f} s wall, {passed}/{len(scripts)} pass")
        medians = {name: statistics.median(values) for name, values in walls.items()}
        for name in columns:
            print(f"{name:6s} wall (median): {medians[name]:.2f} s")
        print(f"ratio engine/plain:   {medians['engine'] / medians['plain']:.3f}")
        if dask is not None:
            print(f"ratio dask/engine:    {medians['dask'] / medians['engine']:.3f}")
        fixed = trivial_overheads(options.trivial_runs, dask)
        shown = ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in fixed.items())
        print(f"per-step fixed overhead (trivial step, median of {options.trivial_runs}): {shown}")
        if dask is not None:
            print(
                f"dask overhead per step over the local engine: {(fixed['dask'] - fixed['engine']) * 1000:.0f} ms "
                f"(trivial step); {(medians['dask'] - medians['engine']) / len(scripts) * 1000:.0f} ms "
                f"(wall difference / {len(scripts)} steps)"
            )
    finally:
        if dask is not None:
            dask.close()


if __name__ == "__main__":
    main()
