"""Benchmark: one streaming `doit run` against generation and scoring run one after the other.

The validation split (15 problems, 50 steps), the built-in `gold` model served by the local endpoint made
slow (`SCICODE_BUILTIN_LATENCY_SECONDS`, default 3 s per answer), `concurrency=4`, `mode=naive`, the
official-layout validation targets (`test_data_dev.h5`, so no run derives targets). Each measurement
starts from fresh state in its own temp folder (doit database, verdict cache, results):

  generation  `doit generate`                       (download, select, generate)
  scoring     `doit score` on those generations     (no model call; fresh verdict cache)
  whole       `doit run`                            (download ... summarize, in a second fresh folder)

and prints the wall times and ratio = whole / (generation + scoring): 1.0 means no overlap at all, and
scoring that starts as soon as each problem is generated brings it towards the floor
max(generation, scoring) / (generation + scoring), printed too: when one stage dominates (a loaded
machine makes scoring, which is CPU-bound, much longer) no overlap can bring the ratio under it.

It also prints `bound`, the least ratio any schedule can reach on this machine, above the floor when
scoring dominates. A whole run lasts at least as long as each of:
  - the slowest problem: it cannot be scored before its answers exist, so (its answers x latency, asked
    one after the other) + (its test-process seconds, measured in the scoring run);
  - the CPU: the scoring run's CPU seconds (all its processes) spread over every core.
With --repeat N the rounds alternate the order (whole first on even rounds), because these machines drift.

    python bench/pipeline_bench.py [--latency 3] [--concurrency 4] [--repeat 1] [--data ../shared/scicode]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from stages.benchmark.pins import required_files  # noqa: E402
from stages.generate.builtin import LATENCY_VARIABLE  # noqa: E402
from stages.storage.paths import RunPaths  # noqa: E402

DODO = PROJECT / "dodo.py"
DEAD_URL = "http://127.0.0.1:9/scicode.zip"  # nothing listens there: download uses the staged files
TARGETS_FILE = "test_data_dev.h5"
TIMEOUT_S = 1800
RUN_NAME = "validation-naive-bg"


@dataclass(frozen=True)
class SlowestProblem:
    """The problem whose scoring took longest in the scoring run: it bounds how early a whole run can end."""

    problem_id: str
    answers: int  # model answers it needs, asked in order (its scored steps)
    test_seconds: float  # test-process seconds of its steps, one after the other

    def least_seconds(self, latency_s: float) -> float:
        return self.answers * latency_s + self.test_seconds


@dataclass(frozen=True)
class Round:
    generation_s: float
    scoring_s: float
    whole_s: float
    tail_s: float  # SlowestProblem.least_seconds
    scoring_cpu_s: float  # CPU seconds of the scoring run, every process included

    @property
    def bound_ratio(self) -> float:
        """The least ratio any schedule reaches: the longest of the lower limits (see the module docstring)."""
        least = max(self.generation_s, self.scoring_s, self.tail_s, self.scoring_cpu_s / (os.cpu_count() or 1))
        return least / (self.generation_s + self.scoring_s)

    @property
    def ratio(self) -> float:
        return self.whole_s / (self.generation_s + self.scoring_s)

    @property
    def perfect_overlap_ratio(self) -> float:
        """The ratio of a whole run taking only its slower stage: the floor, whatever the overlap."""
        return max(self.generation_s, self.scoring_s) / (self.generation_s + self.scoring_s)


class Bench:
    def __init__(self, data: Path, latency_s: float, concurrency: int) -> None:
        self.data = data
        self.latency_s = latency_s
        self.concurrency = concurrency

    def fresh_folder(self, parent: Path, name: str) -> Path:
        """A working folder with the official problem files staged under data/scicode/ (no state, no results)."""
        folder = parent / name
        staged = folder / "data" / "scicode"
        staged.mkdir(parents=True)
        for file_name in required_files():
            shutil.copyfile(self.data / file_name, staged / file_name)
        return folder

    def doit(self, folder: Path, *words: str) -> tuple[float, float]:
        """Wall and CPU seconds (its processes and every descendant) of one doit command in `folder`; exits
        with its output when it fails."""
        settings = (
            f"data_dir={folder / 'data'}",
            f"dataset_zip_url={DEAD_URL}",
            f"h5py_file={self.data / TARGETS_FILE}",
            "model=gold",
            "split=validation",
            "mode=naive",
            f"concurrency={self.concurrency}",
        )
        command = [sys.executable, "-m", "doit", "-f", str(DODO), "-d", str(folder), *words, *settings]
        environment = {**os.environ, LATENCY_VARIABLE: str(self.latency_s)}
        cpu_before, started = _children_cpu_seconds(), time.monotonic()
        result = subprocess.run(command, cwd=folder, env=environment, capture_output=True, text=True, timeout=TIMEOUT_S)
        elapsed, cpu = time.monotonic() - started, _children_cpu_seconds() - cpu_before
        if result.returncode != 0:
            sys.exit(f"`doit {' '.join(words)}` failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}")
        return elapsed, cpu

    def stages_apart(self, parent: Path) -> tuple[float, float, float, SlowestProblem]:
        folder = self.fresh_folder(parent, "apart")
        (generation, _), (scoring, scoring_cpu) = self.doit(folder, "generate"), self.doit(folder, "score")
        return generation, scoring, scoring_cpu, slowest_problem(RunPaths.of(folder / "results", "gold", RUN_NAME))

    def whole(self, parent: Path) -> float:
        return self.doit(self.fresh_folder(parent, "whole"), "run")[0]

    def round(self, number: int) -> Round:
        with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as temp:
            parent = Path(temp)
            if number % 2:
                generation, scoring, scoring_cpu, slowest = self.stages_apart(parent)
                whole = self.whole(parent)
            else:
                whole = self.whole(parent)
                generation, scoring, scoring_cpu, slowest = self.stages_apart(parent)
        return Round(generation, scoring, whole, slowest.least_seconds(self.latency_s), scoring_cpu)


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def slowest_problem(run: RunPaths) -> SlowestProblem:
    """From the scoring run's details: the problem with the most test-process seconds (attempt 0)."""
    problems = []
    for path in sorted(run.details_dir.glob("*.json")):
        steps = json.loads(path.read_text(encoding="utf-8"))["attempts"][0]["meta"]["evaluation"]["steps"]
        problems.append(SlowestProblem(path.stem, len(steps), sum(step["duration_s"] for step in steps)))
    if not problems:
        sys.exit(f"the scoring run wrote no details under {run.details_dir}")
    return max(problems, key=lambda problem: problem.test_seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=3.0, help="seconds per answer of the built-in endpoint")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--data",
        type=Path,
        default=PROJECT.parent / "shared" / "scicode",
        help="folder with the official problem files and test_data_dev.h5",
    )
    args = parser.parse_args()
    missing = [name for name in (*required_files(), TARGETS_FILE) if not (args.data / name).is_file()]
    if missing:
        sys.exit(f"invalid --data {args.data}: missing {', '.join(missing)}")

    bench = Bench(args.data.resolve(), args.latency, args.concurrency)
    print(
        f"validation split, model=gold, {LATENCY_VARIABLE}={args.latency:g}, concurrency={args.concurrency}, "
        f"mode=naive, CPUs={os.cpu_count()}"
    )
    print(
        f"{'round':>5}  {'generation':>10}  {'scoring':>8}  {'gen+score':>9}  {'whole':>7}  {'ratio':>5}  "
        f"{'floor':>5}  {'bound':>5}"
    )
    rounds = []
    for number in range(1, args.repeat + 1):
        result = bench.round(number)
        rounds.append(result)
        print(
            f"{number:>5}  {result.generation_s:>9.1f}s  {result.scoring_s:>7.1f}s  "
            f"{result.generation_s + result.scoring_s:>8.1f}s  {result.whole_s:>6.1f}s  {result.ratio:>5.2f}  "
            f"{result.perfect_overlap_ratio:>5.2f}  {result.bound_ratio:>5.2f}",
            flush=True,
        )
    if len(rounds) > 1:
        ratios = sorted(r.ratio for r in rounds)
        print(
            f"ratio whole / (generation + scoring): min {ratios[0]:.2f}, median {ratios[len(ratios) // 2]:.2f}, "
            f"max {ratios[-1]:.2f} (target <= 0.75)"
        )
    else:
        print(f"ratio whole / (generation + scoring): {rounds[0].ratio:.2f} (target <= 0.75)")


if __name__ == "__main__":
    main()
