"""Benchmark: scoring the 50 validation reference steps with our engine vs. a plain official-style runner.

(a) engine: `stages.score.engine.execute_step` per step (warm zygote, harness, isolation), through the
    shared longest-first pool, no verdict cache;
(b) plain: one fresh `python script.py` per step, the official script (deps + reference code +
    `from scicode.parse.parse import process_hdf5_to_tuple` + targets + test cases), exit 0 = pass,
    steps in file order, same worker count.

Both run in one invocation; with --repeat N the pairs are interleaved (A B, B A, ...), because these
machines drift by +-15 %. Also measures the fixed per-step overhead of each on a trivial step.

    python bench/score_bench.py [--workers N] [--repeat N] [--trivial-runs N] [--data /path/to/shared/scicode]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from stages.isolation import scrubbed_environment  # noqa: E402
from stages.paths import DataPaths  # noqa: E402
from stages.problems import load_split  # noqa: E402
from stages.score.engine import StepJob, execute_step  # noqa: E402
from stages.score.launcher import zygote_for  # noqa: E402
from stages.score.pool import PrioritySlots  # noqa: E402
from stages.score.rewrite import imported_modules, rewrite_tests  # noqa: E402
from stages.score.script import StepScript, build_step_script  # noqa: E402
from stages.score.targets_io import load_step_targets  # noqa: E402

RUNTIME = PROJECT / "stages" / "score" / "runtime"
TIMEOUT = 1800.0
MEMORY_MB = 8192


def reference_scripts(shared: Path) -> list[StepScript]:
    data_paths = DataPaths(shared.parent)
    scripts = []
    for problem in load_split(data_paths, "validation"):
        codes = {step.step_id: step.ground_truth_code for step in problem.steps}
        scripts.extend(build_step_script(problem, i, codes, data_paths) for i, step in enumerate(problem.steps)
                       if not step.prefilled)
    return scripts


def engine_job(script: StepScript, targets: Path) -> StepJob:
    pickles = load_step_targets(targets, script.step_id, len(script.tests), sys.executable) if script.tests else []
    return StepJob(script.problem_id, script.step_id, script.deps, tuple((s.label, s.code) for s in script.sections),
                   rewrite_tests(script.tests), imported_modules([script.deps, *script.tests]), tuple(pickles),
                   sys.executable, TIMEOUT, MEMORY_MB, str(targets.resolve()))


def run_engine(jobs: list[StepJob], workers: int, expected: dict[str, float]) -> tuple[float, int]:
    slots = PrioritySlots(workers)

    def one(job: StepJob) -> bool:
        with slots.slot(expected.get(job.step_id, 1.0)):
            verdict = execute_step(job)
        expected[job.step_id] = verdict.duration_s
        return verdict.status == "pass"

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        passed = sum(pool.map(one, jobs))
    return time.monotonic() - started, passed


def run_plain_one(text: str) -> bool:
    with tempfile.TemporaryDirectory(prefix="scicode-plain-") as folder:
        path = Path(folder) / "script.py"
        path.write_text(text, encoding="utf-8")
        env = scrubbed_environment({"PYTHONPATH": str(RUNTIME)}, home=Path(folder))
        result = subprocess.run([sys.executable, str(path)], cwd=folder, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, timeout=TIMEOUT, check=False)
        return result.returncode == 0


def run_plain(texts: list[str], workers: int) -> tuple[float, int]:
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        passed = sum(pool.map(run_plain_one, texts))
    return time.monotonic() - started, passed


TRIVIAL = StepScript("0", "0.1", "import numpy as np", (), ("assert np.allclose(np.ones(2), 1)",))


def trivial_overheads(runs: int) -> tuple[float, float]:
    job = StepJob("0", "0.1", TRIVIAL.deps, (("step 0.1 code", "def f():\n    return 1\n"),), rewrite_tests(TRIVIAL.tests),
                  imported_modules([TRIVIAL.deps, *TRIVIAL.tests]), (), sys.executable, 60.0, MEMORY_MB, None)
    plain_text = "import numpy as np\n\ndef f():\n    return 1\n\nfrom scicode.parse.parse import process_hdf5_to_tuple\n\n" + TRIVIAL.tests[0] + "\n"
    engine_times, plain_times = [], []
    for _ in range(runs):
        started = time.monotonic()
        verdict = execute_step(job)
        engine_times.append(time.monotonic() - started)
        assert verdict.status == "pass", verdict.reason
        started = time.monotonic()
        assert run_plain_one(plain_text)
        plain_times.append(time.monotonic() - started)
    return statistics.median(engine_times), statistics.median(plain_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--trivial-runs", type=int, default=10)
    parser.add_argument("--data", type=Path, default=PROJECT.parent / "shared" / "scicode")
    options = parser.parse_args()
    targets = options.data / "test_data_dev.h5"
    scripts = reference_scripts(options.data)
    started = time.monotonic()
    zygote_for(sys.executable)
    print(f"zygote start (one-off): {time.monotonic() - started:.2f} s")
    jobs = [engine_job(script, targets) for script in scripts]
    texts = [script.official_text(str(targets.resolve())) for script in scripts]
    expected: dict[str, float] = {}
    engine_walls, plain_walls = [], []
    print(f"{len(scripts)} reference steps, {options.workers} workers, {options.repeat} interleaved pair(s)")
    for round_index in range(options.repeat):
        order = ("engine", "plain") if round_index % 2 == 0 else ("plain", "engine")
        for which in order:
            if which == "engine":
                wall, passed = run_engine(jobs, options.workers, expected)
                engine_walls.append(wall)
            else:
                wall, passed = run_plain(texts, options.workers)
                plain_walls.append(wall)
            print(f"  round {round_index + 1} {which:6s}: {wall:7.2f} s wall, {passed}/{len(scripts)} pass")
    engine_wall, plain_wall = statistics.median(engine_walls), statistics.median(plain_walls)
    print(f"engine wall (median): {engine_wall:.2f} s")
    print(f"plain  wall (median): {plain_wall:.2f} s")
    print(f"ratio engine/plain:   {engine_wall / plain_wall:.3f}")
    engine_fixed, plain_fixed = trivial_overheads(options.trivial_runs)
    print(f"per-step fixed overhead (trivial step, median of {options.trivial_runs}): "
          f"engine {engine_fixed * 1000:.0f} ms, plain {plain_fixed * 1000:.0f} ms")


if __name__ == "__main__":
    main()
