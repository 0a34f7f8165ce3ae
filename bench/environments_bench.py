"""Benchmark: scoring the 50 validation reference steps in one grading environment and in two.

Three configurations of the score stage (`run_score` of the 15 validation problems, 4 problems at once as doit
runs them, `score_workers` test processes at once), each on a fresh verdict cache so that every step executes:

(a) one:   `environments=2024-era:PY1`
(b) short: `environments=2024-era:PY1,current:PY2` (the default: a pass in the first environment ends a step)
(c) all:   the same two with `all_environments=true` (every step runs in both; every verdict recorded)

PY1 is the 2024-era venv (`doit environments` builds it; --era2024 names another), PY2 this interpreter. Each
interpreter keeps its own warm zygote, started once before the rounds. All three run in one invocation; with
--repeat N the rounds are interleaved (the order rotates each round: a b c, b c a, ...), because these machines
drift by +-15 %. Prints each configuration's median wall time and the ratios short/one and all/one.

    python bench/environments_bench.py [--workers N] [--repeat N] [--era2024 /path/bin/python]
                                       [--data /path/to/shared/scicode]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from stages.benchmark.environments import protocol_environments  # noqa: E402
from stages.benchmark.problems import load_split  # noqa: E402
from stages.config.settings import Settings, load_settings  # noqa: E402
from stages.score.parent import stage  # noqa: E402
from stages.score.parent.environments import build_environment  # noqa: E402
from stages.score.parent.launcher import stop_zygotes, zygote_for  # noqa: E402
from stages.targets import ResolvedTargets  # noqa: E402
from tests.score.score_helpers import reference_codes, write_generation  # noqa: E402

CONFIGURATIONS = ("one", "short", "all")


def configuration_values(which: str, era2024: str) -> dict[str, str]:
    one = f"2024-era:{era2024}"
    both = f"{one},current:{sys.executable}"
    return {
        "one": {"environments": one},
        "short": {"environments": both},
        "all": {"environments": both, "all_environments": "true"},
    }[which]


def score_once(which: str, era2024: str, data: Path, workers: int) -> tuple[float, int, int]:
    """Wall seconds, steps passed and test processes run, scoring the validation split in a fresh folder."""
    workdir = Path(tempfile.mkdtemp(prefix=f"environments-bench-{which}-"))
    previous = Path.cwd()
    os.chdir(workdir)  # the verdict cache lives under the working directory: a fresh one
    try:
        settings: Settings = load_settings(
            {
                "data_dir": str(data.parent),
                "results_dir": str(workdir / "results"),
                "score_workers": str(workers),
                "step_timeout_seconds": "900",
                **configuration_values(which, era2024),
            },
            cwd=workdir,
        )
        targets = ResolvedTargets("explicit", data / "test_data_dev.h5", None, "validation targets")
        problems = load_split(settings.data_paths, "validation")
        for problem in problems:
            write_generation(settings, problem, reference_codes(problem))
        before = stage.EXECUTIONS["count"]
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=4) as pool:
            summaries = list(pool.map(lambda p: stage.run_score(settings, p.problem_id, targets), problems))
        wall = time.monotonic() - started
        return wall, sum(summary["passed"] for summary in summaries), stage.EXECUTIONS["count"] - before
    finally:
        os.chdir(previous)
        shutil.rmtree(workdir, ignore_errors=True)


def default_era2024() -> str:
    pins = next(pins for pins in protocol_environments() if pins.name == "2024-era")
    root = Path(tempfile.gettempdir()) / f"scicode-environments-{os.getuid()}"  # the test suite's kept venvs
    return str(build_environment(root, pins))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--era2024", default="", help="the 2024-era python (default: built or reused)")
    parser.add_argument("--data", type=Path, default=PROJECT.parent / "shared" / "scicode")
    options = parser.parse_args()
    era2024 = options.era2024 or default_era2024()
    for python in (era2024, sys.executable):
        started = time.monotonic()
        zygote_for(python)
        print(f"zygote of {python} (one-off): {time.monotonic() - started:.2f} s")
    walls: dict[str, list[float]] = {name: [] for name in CONFIGURATIONS}
    print(f"50 reference steps, {options.workers} test processes at once, {options.repeat} interleaved round(s)")
    try:
        for round_index in range(options.repeat):
            shift = round_index % len(CONFIGURATIONS)
            for which in CONFIGURATIONS[shift:] + CONFIGURATIONS[:shift]:
                wall, passed, executed = score_once(which, era2024, options.data, options.workers)
                walls[which].append(wall)
                print(
                    f"  round {round_index + 1} {which:5s}: {wall:7.2f} s wall, {passed}/50 pass, "
                    f"{executed} test processes"
                )
    finally:
        stop_zygotes()
    medians = {name: statistics.median(values) for name, values in walls.items()}
    for name in CONFIGURATIONS:
        print(f"{name:5s} wall (median): {medians[name]:.2f} s")
    print(f"ratio short/one: {medians['short'] / medians['one']:.3f}")
    print(f"ratio all/one:   {medians['all'] / medians['one']:.3f}")


if __name__ == "__main__":
    main()
