"""Benchmark: what a no-op rerun costs, this checkout against a baseline revision of the project.

A no-op rerun is `doit run` over a run that is complete: every task is up to date, so its cost is starting the
interpreter, importing what the wiring needs and checking the tasks. Each checkout (this one, and the baseline
revision checked out into a temporary git worktree) gets a working folder with the official problem files
staged, one complete run of a validation problem with the built-in `gold` model and the official-layout targets
(`test_data_dev.h5`), then `--repeat` no-op reruns, the two checkouts taking turns (these machines drift). It
prints, for each checkout, the median wall time of a rerun and the number of modules (and of `stages` modules) the
rerun imported, and the ratio of the medians (this / baseline: 1.0 means no added cost).

    python bench/noop_rerun_bench.py [--baseline 4b1b87f] [--repeat 7] [--problem 1] [--data ../shared/scicode]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
DEAD_URL = "http://127.0.0.1:9/scicode.zip"  # nothing listens there: download uses the staged files
TARGETS_FILE = "test_data_dev.h5"
TIMEOUT_S = 900
sys.path.insert(0, str(PROJECT))

from stages.benchmark.pins import required_files  # noqa: E402 (the files a run stages: the same in both checkouts)

# Runs doit's command line in this interpreter and, at exit, writes the names of every imported module.
IMPORTS_PROBE = (
    "import atexit, runpy, sys\n"
    "target = sys.argv.pop(1)\n"
    "atexit.register(lambda: open(target, 'w').write('\\n'.join(sorted(sys.modules))))\n"
    "sys.argv = ['doit', *sys.argv[1:]]\n"
    "runpy.run_module('doit', run_name='__main__')\n"
)


@dataclass
class Checkout:
    name: str
    root: Path
    folder: Path
    seconds: list[float] = field(default_factory=list)
    modules: int = 0
    stages_modules: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def staged_folder(parent: Path, name: str, data: Path) -> Path:
    """A working folder with the official problem files staged under data/scicode/."""
    folder = parent / name
    staged = folder / "data" / "scicode"
    staged.mkdir(parents=True)
    for file_name in required_files():
        shutil.copyfile(data / file_name, staged / file_name)
    return folder


def doit_words(checkout: Checkout, data: Path, problem: str) -> list[str]:
    return [
        "-f",
        str(checkout.root / "dodo.py"),
        "-d",
        str(checkout.folder),
        "run",
        f"data_dir={checkout.folder / 'data'}",
        f"dataset_zip_url={DEAD_URL}",
        f"h5py_file={data / TARGETS_FILE}",
        "model=gold",
        "split=validation",
        f"sample_ids={problem}",
    ]


def run(checkout: Checkout, command: list[str]) -> float:
    """Wall seconds of `command` in the checkout's folder, with the checkout's package first on the path; exits
    with its output when it fails."""
    environment = {**os.environ, "PYTHONPATH": str(checkout.root)}
    started = time.monotonic()
    result = subprocess.run(
        command, cwd=checkout.folder, env=environment, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"{checkout.name}: {' '.join(command[:6])}... failed (exit {result.returncode}):\n{result.stderr}")
    return elapsed


def count_imports(checkout: Checkout, words: list[str]) -> None:
    listing = checkout.folder / "imported_modules.txt"
    run(checkout, [sys.executable, "-c", IMPORTS_PROBE, str(listing), *words])
    modules = listing.read_text(encoding="utf-8").split()
    listing.unlink()
    checkout.modules = len(modules)
    checkout.stages_modules = sum(1 for name in modules if name == "stages" or name.startswith("stages."))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="4b1b87f", help="the revision to compare with (default: 4b1b87f)")
    parser.add_argument("--repeat", type=int, default=7, help="no-op reruns per checkout (default: 7)")
    parser.add_argument("--problem", default="1", help="the validation problem of the run (default: 1)")
    parser.add_argument("--data", type=Path, default=PROJECT.parent / "shared" / "scicode")
    args = parser.parse_args()
    data = args.data.resolve()
    with tempfile.TemporaryDirectory(prefix="noop-bench-") as temp:
        parent = Path(temp)
        baseline_root = parent / "baseline"
        subprocess.run(
            ["git", "-C", str(PROJECT), "worktree", "add", "--detach", "-q", str(baseline_root), args.baseline],
            check=True,
        )
        try:
            checkouts = [
                Checkout("this", PROJECT, staged_folder(parent, "this-run", data)),
                Checkout(f"baseline {args.baseline}", baseline_root, staged_folder(parent, "baseline-run", data)),
            ]
            for checkout in checkouts:
                words = doit_words(checkout, data, args.problem)
                print(
                    f"{checkout.name}: complete run of problem {args.problem}: {run(checkout, [sys.executable, '-m', 'doit', *words]):.1f} s"
                )
                count_imports(checkout, words)
            for round_number in range(args.repeat):
                for checkout in checkouts if round_number % 2 == 0 else reversed(checkouts):
                    command = [sys.executable, "-m", "doit", *doit_words(checkout, data, args.problem)]
                    checkout.seconds.append(run(checkout, command))
        finally:
            subprocess.run(
                ["git", "-C", str(PROJECT), "worktree", "remove", "--force", str(baseline_root)], check=False
            )
    for checkout in checkouts:
        print(
            f"{checkout.name:>22}: no-op rerun median {checkout.median:.3f} s over {len(checkout.seconds)} "
            f"(min {min(checkout.seconds):.3f}, max {max(checkout.seconds):.3f}); "
            f"{checkout.modules} modules imported, {checkout.stages_modules} of stages"
        )
    print(f"ratio this / baseline (median): {checkouts[0].median / checkouts[1].median:.3f}")


if __name__ == "__main__":
    main()
