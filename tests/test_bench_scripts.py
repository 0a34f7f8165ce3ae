"""The benchmark scripts still run against the code they measure (they are not imported by anything else, so
nothing else would notice a changed signature): one trivial step each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]


def test_the_step_breakdown_runs_one_step() -> None:
    result = subprocess.run(
        [sys.executable, str(PROJECT / "bench" / "step_breakdown.py"), "--runs", "1", "--gap-ms", "0"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "TOTAL" in result.stdout and "exit of the confined process (per step)" in result.stdout


def test_the_score_benchmark_measures_a_trivial_step_in_both_columns() -> None:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import score_bench; "
        "print(sorted(score_bench.trivial_overheads(1, None)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(PROJECT / "bench")], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "['engine', 'plain']"


def test_the_environments_benchmark_names_its_three_configurations() -> None:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import environments_bench as b; "
        "print([sorted(b.configuration_values(name, '/e/python')) for name in b.CONFIGURATIONS])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(PROJECT / "bench")], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last == "[['environments'], ['environments'], ['all_environments', 'environments']]"


@pytest.mark.slow
def test_the_noop_rerun_benchmark_compares_this_checkout_with_a_baseline_revision() -> None:
    result = subprocess.run(
        [sys.executable, str(PROJECT / "bench" / "noop_rerun_bench.py"), "--baseline", "HEAD", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ratio this / baseline (median):" in result.stdout and "baseline HEAD: no-op rerun median" in result.stdout
