"""compare: two synthetic runs with known flips, split checks, missing runs, attempts, and the written file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stages.compare.record import ComparisonRecord, read_comparison_record
from stages.compare.stage import CompareError, compare_runs, write_comparison
from stages.config.settings import Mode, Settings, Split
from stages.storage.artifacts import fingerprint, read_artifact, write_artifact
from stages.storage.json_values import JSONObject, freeze_object
from stages.storage.paths import RunPaths
from tests.support.run_artifacts import json_list, json_objects, read_record

# ---------------------------------------------------------------------------
# Building runs
# ---------------------------------------------------------------------------

# problem id -> (step ids, prefilled step ids)
PROBLEMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "1": (("1.1", "1.2"), ()),
    "2": (("2.1", "2.2", "2.3"), ()),
    "3": (("3.1", "3.2", "3.3"), ("3.2",)),
    "4": (("4.1", "4.2"), ()),
    "5": (("5.1",), ()),
    "9": (("9.1",), ()),
}
SPLIT_OF = {"1": "validation", "2": "validation", "3": "validation", "4": "validation", "5": "validation", "9": "test"}


def make_run(
    results: Path,
    model: str,
    split: Split,
    problem_ids: list[str],
    *,
    mode: Mode = "tool_use",
    config_extra: dict | None = None,
    **settings_extra: Any,
) -> RunPaths:
    settings = Settings(model=model, split=split, mode=mode, results_dir=str(results), **settings_extra)
    paths = settings.run_paths
    write_artifact(
        paths.config,
        "config",
        {
            "fingerprint": fingerprint(settings.redacted()),
            "status": "complete",
            "settings": settings.redacted(),
            **(config_extra or {}),
        },
    )
    write_artifact(
        paths.selection,
        "selection",
        {
            "fingerprint": fingerprint([split, problem_ids]),
            "status": "complete",
            "split": split,
            "category": ["all"],
            "sample_ids": [],
            "problems": [
                {
                    "problem_id": pid,
                    "category": "unclassified",
                    "fingerprint": fingerprint(pid),
                    "split": SPLIT_OF[pid],
                    "steps": len(PROBLEMS[pid][0]),
                    "scored_steps": len(PROBLEMS[pid][0]) - len(PROBLEMS[pid][1]),
                    "layout": [{"step_id": sid, "prefilled": sid in PROBLEMS[pid][1]} for sid in PROBLEMS[pid][0]],
                }
                for pid in problem_ids
            ],
        },
    )
    return paths


def step_verdict(step_id: str, status: str) -> dict[str, Any]:
    return {
        "step_id": step_id,
        "status": status,
        "correct": status == "pass",
        "tests": {"total": 2, "passed": 2 if status == "pass" else 0},
        "returncode": 0 if status == "pass" else 1,
        "stdout": "",
        "stderr": "",
        "duration_s": 0.2,
        "reason": "official prefilled step" if status == "skipped" else "",
    }


def attempt_record(
    pid: str,
    statuses: list[str],
    *,
    error: str | None = None,
    usage: JSONObject | None = None,
    latency_s: float | None = None,
) -> dict[str, Any]:
    step_ids = PROBLEMS[pid][0]
    steps = [step_verdict(sid, status) for sid, status in zip(step_ids, statuses)]
    scored = [s for s in steps if s["status"] != "skipped"]
    passed = sum(s["status"] == "pass" for s in scored)
    correct = error is None and passed == len(PROBLEMS[pid][0]) - len(PROBLEMS[pid][1])
    meta: dict[str, Any] = {
        "evaluation": {
            "problem_id": pid,
            "problem_correct": correct,
            "total_correct": passed,
            "total_steps": len(scored),
            "subproblem_correctness": [s["status"] == "pass" for s in scored],
            "steps": steps,
            "error": error,
        }
    }
    if usage is not None:
        meta["usage"] = usage
    if latency_s is not None:
        meta["latency_s"] = latency_s
    return {
        "final_answer": {"step_codes": {}},
        "artifacts": {"step_codes": {}},
        "trajectory": [],
        "correct": correct,
        "score": passed / len(scored) if scored else 0.0,
        "meta": meta,
    }


def write_details(paths: RunPaths, pid: str, *attempts: dict[str, Any], status: str = "complete") -> None:
    write_artifact(
        paths.details(pid),
        "details",
        {
            "fingerprint": fingerprint([str(paths.run_dir), pid]),
            "status": status,
            "task_id": pid,
            "category": "unclassified",
            "attempts": list(attempts),
        },
    )


def usage(input_tokens: int, output_tokens: int, calls: int | None = None) -> JSONObject:
    record: JSONObject = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    }
    if calls is not None:
        record["calls"] = calls
    return record


def generation_step(step_id: str, step_usage: JSONObject, latency_s: float, calls: int) -> dict[str, Any]:
    return {
        "step_id": step_id,
        "prefilled": False,
        "status": "ok",
        "prompt_fingerprint": fingerprint(step_id),
        "code": "def f():\n    return 1\n",
        "raw_answer": "```python\ndef f():\n    return 1\n```",
        "error": None,
        "trajectory": {"messages": [], "calls": [{"latency_s": latency_s / calls, "usage": usage(1, 1)}] * calls},
        "usage": step_usage,
        "latency_s": latency_s,
    }


def write_generation(paths: RunPaths, pid: str, steps: list[dict[str, Any]]) -> None:
    write_artifact(
        paths.generation(pid),
        "generation",
        {
            "fingerprint": fingerprint(["generation", pid]),
            "status": "complete",
            "problem_id": pid,
            "attempt": 0,
            "model": "alpha",
            "mode": "tool_use",
            "steps": list(steps),
            "usage": usage(999, 999),
            "error": None,
        },
    )


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    """Run A (alpha) and run B (beta) on the same five validation problems.

    problem  A                              B
    1        pass pass        resolved      pass fail          unresolved   (problem and step 1.2 lost)
    2        fail pass pass   unresolved    pass pass pass     resolved     (problem and step 2.1 gained)
    3        pass skip pass   resolved      pass skip pass     resolved
    4        no details file  unresolved    timeout parse_error unresolved
    5        pass             resolved      generation error, no verdict   (problem and step 5.1 lost)
    """
    results = tmp_path / "results"
    pids = ["1", "2", "3", "4", "5"]
    a = make_run(results, "alpha", "validation", pids)
    write_details(a, "1", attempt_record("1", ["pass", "pass"], usage=usage(100, 50, 2), latency_s=1.5))
    write_details(a, "2", attempt_record("2", ["fail", "pass", "pass"]))  # usage from the generation file
    write_generation(
        a, "2", [generation_step("2.1", usage(10, 5), 0.5, 1), generation_step("2.2", usage(20, 10, 3), 0.25, 3)]
    )
    write_details(a, "3", attempt_record("3", ["pass", "skipped", "pass"]))  # no usage anywhere
    write_details(a, "5", attempt_record("5", ["pass"], usage=usage(1, 1, 1), latency_s=0.5))

    b = make_run(results, "beta", "validation", pids)
    write_details(b, "1", attempt_record("1", ["pass", "fail"], usage=usage(200, 100, 1), latency_s=2.0))
    write_details(b, "2", attempt_record("2", ["pass", "pass", "pass"], usage=usage(200, 100, 1), latency_s=2.0))
    write_details(b, "3", attempt_record("3", ["pass", "skipped", "pass"], usage=usage(200, 100, 1), latency_s=2.0))
    write_details(b, "4", attempt_record("4", ["timeout", "parse_error"], usage=usage(200, 100, 1), latency_s=2.0))
    write_details(
        b,
        "5",
        attempt_record("5", [], error="HTTP 500 after 6 retries", usage=usage(10, 0, 1), latency_s=0.5),
        status="generation_error",
    )
    return a.run_dir, b.run_dir


def row(report: str, first_cell: str) -> list[str]:
    """The cells of the table row whose first cell is `first_cell` (the first such row)."""
    for line in report.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no table row {first_cell!r} in report:\n{report}")


def section(report: str, heading: str) -> str:
    """The text under `heading` up to the next heading of any level."""
    lines = report.splitlines()
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("#")), len(lines))
    return "\n".join(lines[start:end])


# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------


def test_every_recorded_difference_is_named_under_the_significance_line(tmp_path: Path) -> None:
    results = tmp_path / "results"
    versions = {"numpy": "2.4.6", "python": "3.11.7"}
    a = make_run(results, "alpha", "validation", ["1"], config_extra={"versions": versions, "confinement": "full"})
    b = make_run(
        results,
        "beta",
        "validation",
        ["1"],
        config_extra={"versions": {**versions, "numpy": "2.0.0"}, "confinement": "none (no user namespaces)"},
        step_timeout_seconds=30.0,
    )
    for paths in (a, b):
        write_details(paths, "1", attempt_record("1", ["pass"]))
    report = compare_runs(a.run_dir, b.run_dir)
    lines = report.splitlines()
    assert lines[2] == (
        "Besides the model, 3 setting(s) differ: `confinement`, `step_timeout_seconds`, `version of numpy`."
    )
    assert row(report, "step_timeout_seconds") == ["step_timeout_seconds", "`1800.0`", "`30.0`"]


def test_identity_side_by_side(two_runs: tuple[Path, Path]) -> None:
    report = compare_runs(*two_runs)
    # names read from the runs' own files are shown in code spans (never rendered as Markdown or HTML)
    assert report.splitlines()[2] == "Only the model differs."
    assert (
        report.splitlines()[4]
        == "# Comparison: `alpha/validation-tool_use-bg` (A) vs `beta/validation-tool_use-bg` (B)"
    )
    assert row(report, "model") == ["model", "`alpha`", "`beta`"]
    assert row(report, "run") == ["run", "`validation-tool_use-bg`", "`validation-tool_use-bg`"]
    assert row(report, "split") == ["split", "validation", "validation"]
    assert row(report, "mode") == ["mode", "tool_use", "tool_use"]
    assert row(report, "with_background") == ["with_background", "true", "true"]
    assert "Compared problems: all 5 selected problems (the same in both runs)." in report


def test_first_line_states_the_paired_tests(two_runs: tuple[Path, Path]) -> None:
    # Scored by both (complete details): 1, 2, 3 (A has no details for 4; B's generation of 5 failed).
    # Resolved: 1 by A only, 2 by B only, 3 by both: McNemar n = 2, min = 1: 2 * (1 + 2) / 4 = 1.5 -> p = 1.
    # Steps: 1: A 2/2, B 1/2 (-1); 2: A 2/3, B 3/3 (+1); 3: 2/2 both (0): D = 0 / 7 = 0;
    # SE = sqrt(1 + 1 + 0) / 7 = 0.202031; z = 0, p = 1.
    # Interval: p_A = p_B = 6/7 = 0.857143. A's sums 2 - 1.714286, 2 - 2.571429, 2 - 1.714286 = 0.285714,
    # -0.571429, 0.285714: V_cl = 0.489796 / 49 = 0.009996 below V_bin = 0.122449 / 7 = 0.017493, so deff = 1 and
    # n_eff = 7; B's sums -0.714286, 0.428571, 0.285714: V_cl = 0.775510 / 49, deff 1 too. Both: Wilson of 6 of 7,
    # [0.486872, 0.974320]. phi = sum a b / sqrt(0.489796 * 0.775510) = -0.367347 / 0.616316 = -0.596040
    # (negative: no correction). Half widths sqrt(0.370271^2 + 2 * 0.596040 * 0.370271 * 0.117177 + 0.117177^2)
    # = sqrt(0.202552) = 0.450058 either side: -45.0 pp to +45.0 pp.
    first = compare_runs(*two_runs).splitlines()[0]
    assert first == (
        "Paired tests on the 3 problems both runs scored (attempt 1): resolved problems, A only 1 vs B only 1, "
        "exact McNemar p = 1: not distinguishable from noise; step pass rate B - A +0.0 pp (95% CI -45.0 pp to "
        "+45.0 pp, Newcombe hybrid score, clustered by problem), p = 1: not distinguishable from noise."
    )


def test_paired_section_lists_problems_scored_by_one_run_only(two_runs: tuple[Path, Path]) -> None:
    report = compare_runs(*two_runs)
    paired = section(report, "## Paired tests (problems both runs scored, attempt 1)")
    assert row(paired, "problems both runs scored") == ["problems both runs scored", "3"]
    assert row(paired, "resolved by A only / by B only (discordant)")[1] == "1 / 1"
    assert row(paired, "standard error (clustered by problem), for the test")[1] == "20.2 pp"
    assert row(paired, "95% interval (Newcombe hybrid score, clustered by problem)")[1] == "-45.0 pp to +45.0 pp"
    assert "- scored by A only (1): 5" in paired and "- scored by B only (1): 4" in paired
    assert "flip" not in report.lower()


def test_a_clear_difference_is_called_distinguishable(tmp_path: Path) -> None:
    # Six one-step problems: A fails all, B passes all. McNemar: 0 vs 6, p = 2 / 64 = 0.03125 < 0.05.
    # Steps: D = 6/6 = 1 and every problem's difference equals D: SE = 0, no step test is possible.
    results = tmp_path / "results"
    pids = ["1", "2", "3", "4", "5", "9"]
    a = make_run(results, "alpha", "all", pids)
    b = make_run(results, "beta", "all", pids)
    for pid in pids:
        step_ids, prefilled = PROBLEMS[pid]
        write_details(a, pid, attempt_record(pid, ["skipped" if sid in prefilled else "fail" for sid in step_ids]))
        write_details(b, pid, attempt_record(pid, ["skipped" if sid in prefilled else "pass" for sid in step_ids]))
    first = compare_runs(a.run_dir, b.run_dir).splitlines()[0]
    assert "A only 0 vs B only 6, exact McNemar p = 0.031: distinguishable from noise" in first
    # steps 1.1 1.2, 2.1-2.3, 3.1 3.3 (3.2 prefilled), 4.1 4.2, 5.1, 9.1: all 11 fail in A and pass in B
    assert "step pass rate B - A +100.0 pp" in first and "p n/a: no test possible" in first
    # A at 0% and B at 100% over 6 problems (n_eff 6 each, phi 0): u_A = 1 - l_B = z^2 / (6 + z^2) = 0.390334;
    # low = 1 - sqrt(2) * 0.390334 = 0.447985, high = 1
    assert "(95% CI +44.8 pp to +100.0 pp, Newcombe hybrid score, clustered by problem)" in first


@pytest.mark.parametrize(
    ("pids", "status", "shown"),
    [
        # both runs pass every step of problems 1 and 2 (5 steps): each rate [2 / (2 + z^2), 1] = [0.342380, 1]
        # with n_eff = 2 problems, phi 0 (undefined at 100%): -(1 - 0.342380) to +(1 - 0.342380)
        (["1", "2"], "pass", "-65.8 pp to +65.8 pp"),
        # both fail every step: [0, 0.657620] each, the same interval
        (["1", "2"], "fail", "-65.8 pp to +65.8 pp"),
        # one problem, every step passed by both: n_eff 1, [0.206549, 1]: +-79.3 pp
        (["1"], "pass", "-79.3 pp to +79.3 pp"),
    ],
)
def test_runs_whose_steps_all_agree_get_an_interval_of_width(
    tmp_path: Path, pids: list[str], status: str, shown: str
) -> None:
    """The comparison of the self-test with itself said `+0.0 pp to +0.0 pp`: agreeing steps are no proof that
    the two runs' rates are the same."""
    results = tmp_path / "results"
    a = make_run(results, "alpha", "all", pids)
    b = make_run(results, "beta", "all", pids)
    for paths in (a, b):
        for pid in pids:
            step_ids, prefilled = PROBLEMS[pid]
            write_details(
                paths, pid, attempt_record(pid, ["skipped" if sid in prefilled else status for sid in step_ids])
            )
    path = write_comparison(Settings(runs=(str(a.run_dir), str(b.run_dir)), results_dir=str(results)))
    report = path.read_text(encoding="utf-8")
    assert f"step pass rate B - A +0.0 pp (95% CI {shown}, Newcombe hybrid score, clustered by problem)" in report
    assert (
        row(
            section(report, "## Paired tests (problems both runs scored, attempt 1)"),
            "95% interval (Newcombe hybrid score, clustered by problem)",
        )[1]
        == shown
    )
    steps = read_record(path.with_suffix(".json"), "compare")["paired"]["steps"]
    assert steps["method"] == "newcombe_clustered" and steps["correlation"] == 0.0
    assert steps["high"] - steps["low"] > 0 and steps["description"].startswith("Newcombe's hybrid score interval")


def test_metrics_and_deltas_from_details(two_runs: tuple[Path, Path]) -> None:
    run_a, run_b = two_runs
    # a stale summary.json must not matter: numbers come from the details files
    (run_a / "summary.json").write_text('{"main_problem_resolve_rate": 1.0}', encoding="utf-8")
    report = compare_runs(run_a, run_b)
    # A resolves 1, 3, 5; B resolves 2, 3. Scored steps 2+3+2+2+1 = 10; A passes 7, B passes 6.
    assert row(report, "main_problem_resolve_rate") == [
        "main_problem_resolve_rate",
        "3/5 (60.0%)",
        "2/5 (40.0%)",
        "-20.0 pp (-1)",
    ]
    assert row(report, "subproblem") == ["subproblem", "7/10 (70.0%)", "6/10 (60.0%)", "-10.0 pp (-1)"]
    assert row(report, "main_problem_total") == ["main_problem_total", "5", "5", "+0"]
    assert row(report, "subproblem_total") == ["subproblem_total", "10", "10", "+0"]
    assert row(report, "Error (generation failed or no details)") == [
        "Error (generation failed or no details)",
        "1/5 (20.0%)",
        "1/5 (20.0%)",
        "+0",
    ]
    assert row(report, "no valid details file") == ["no valid details file", "1/5 (20.0%)", "0/5 (0.0%)", "-1"]


def test_status_counts(two_runs: tuple[Path, Path]) -> None:
    report = compare_runs(*two_runs)
    # 11 steps in all (10 scored + prefilled 3.2); A's problem 4 has no details: 2 steps without a verdict
    expected = {
        "pass": ("7/11 (63.6%)", "6/11 (54.5%)", "-1"),
        "fail": ("1/11 (9.1%)", "1/11 (9.1%)", "+0"),
        "timeout": ("0/11 (0.0%)", "1/11 (9.1%)", "+1"),
        "parse_error": ("0/11 (0.0%)", "1/11 (9.1%)", "+1"),
        "eval_error": ("0/11 (0.0%)", "0/11 (0.0%)", "+0"),
        "skipped": ("1/11 (9.1%)", "1/11 (9.1%)", "+0"),
        "no_verdict": ("2/11 (18.2%)", "1/11 (9.1%)", "-1"),
    }
    for status, cells in expected.items():
        assert row(section(report, "## Step statuses"), status) == [status, *cells]


def test_problem_flips(two_runs: tuple[Path, Path]) -> None:
    report = compare_runs(*two_runs)
    lost = section(report, "### resolved in A, unresolved in B (2)")
    assert row(lost, "1") == ["1", "2/2 (100.0%)", "1/2 (50.0%)", "1.2 fail"]
    assert row(lost, "5") == ["5", "1/1 (100.0%)", "0/1 (0.0%)", "generation error"]
    gained = section(report, "### unresolved in A, resolved in B (1)")
    assert row(gained, "2") == ["2", "2/3 (66.7%)", "3/3 (100.0%)", "2.1 fail"]
    for unchanged in ("3", "4"):
        with pytest.raises(AssertionError):
            row(lost + gained, unchanged)


def test_step_flips(two_runs: tuple[Path, Path]) -> None:
    report = compare_runs(*two_runs)
    lost = section(report, "### pass in A, not pass in B (2)")
    assert row(lost, "1.2") == ["1.2", "pass", "fail"]
    assert row(lost, "5.1") == ["5.1", "pass", "no_verdict"]
    gained = section(report, "### not pass in A, pass in B (1)")
    assert row(gained, "2.1") == ["2.1", "fail", "pass"]
    assert "3.2" not in lost + gained and "4.1" not in lost + gained


def test_flips_reverse_when_runs_swap(two_runs: tuple[Path, Path]) -> None:
    run_a, run_b = two_runs
    report = compare_runs(run_b, run_a)
    assert row(report, "main_problem_resolve_rate")[3] == "+20.0 pp (+1)"
    assert row(section(report, "### unresolved in A, resolved in B (2)"), "5")[0] == "5"
    assert row(section(report, "### not pass in A, pass in B (2)"), "5.1") == ["5.1", "no_verdict", "pass"]


def test_tokens_and_latency(two_runs: tuple[Path, Path]) -> None:
    cost = section(compare_runs(*two_runs), "## Tokens and latency")
    # A: problem 1 from details meta (100/50, 2 calls, 1.5 s), problem 2 from its generation's steps
    # (10/5 + 20/10, 1 + 3 calls, 0.75 s), problem 5 from meta (1/1, 1 call, 0.5 s); 3 of 5 attempts report.
    # B: four problems at 200/100, 1 call, 2.0 s, and problem 5 at 10/0, 1 call, 0.5 s.
    assert row(cost, "input tokens") == ["input tokens", "131", "810", "+679"]
    assert row(cost, "output tokens") == ["output tokens", "66", "400", "+334"]
    assert row(cost, "total tokens") == ["total tokens", "197", "1210", "+1013"]
    assert row(cost, "model calls") == ["model calls", "7", "5", "-2"]
    assert row(cost, "model latency (s, summed)") == ["model latency (s, summed)", "2.8", "8.5", "+5.8"]
    assert row(cost, "attempts reporting usage") == ["attempts reporting usage", "3/5", "5/5", "+2"]


def test_single_attempt_runs_have_no_attempt_section(two_runs: tuple[Path, Path]) -> None:
    assert "## Attempts" not in compare_runs(*two_runs)


# ---------------------------------------------------------------------------
# Splits, selections and missing runs
# ---------------------------------------------------------------------------


@pytest.fixture
def run_of_all_split(tmp_path: Path) -> Path:
    c = make_run(tmp_path / "results", "gamma", "all", ["1", "2", "9"])
    write_details(c, "1", attempt_record("1", ["fail", "fail"]))
    write_details(c, "2", attempt_record("2", ["pass", "pass", "pass"]))
    write_details(c, "9", attempt_record("9", ["pass"]))
    return c.run_dir


def test_split_mismatch_refused(two_runs: tuple[Path, Path], run_of_all_split: Path) -> None:
    run_a, _ = two_runs
    with pytest.raises(CompareError) as caught:
        compare_runs(run_a, run_of_all_split)
    message = str(caught.value)
    assert "\n" not in message
    assert f"{run_a} is split=validation" in message and f"{run_of_all_split} is split=all" in message
    assert "allow_split_mismatch" in message


def test_split_mismatch_allowed_compares_common_problems(two_runs: tuple[Path, Path], run_of_all_split: Path) -> None:
    run_a, _ = two_runs
    report = compare_runs(run_a, run_of_all_split, allow_split_mismatch=True)
    assert (
        "**Splits differ (A: validation, B: all): only the 2 problems selected in both runs are compared.**" in report
    )
    assert "- only in A (3): 3, 4, 5" in report
    assert "- only in B (1): 9" in report
    # common problems 1 and 2: A resolves 1; C resolves 2. Steps: A 2+2 = 4 of 5, C 0+3 = 3 of 5.
    assert row(report, "main_problem_resolve_rate") == [
        "main_problem_resolve_rate",
        "1/2 (50.0%)",
        "1/2 (50.0%)",
        "+0.0 pp (+0)",
    ]
    assert row(report, "subproblem") == ["subproblem", "4/5 (80.0%)", "3/5 (60.0%)", "-20.0 pp (-1)"]
    assert row(report, "problems selected") == ["problems selected", "5", "3"]
    steps_lost = section(report, "### pass in A, not pass in B (2)")
    assert row(steps_lost, "1.1") == ["1.1", "pass", "fail"] and row(steps_lost, "1.2") == ["1.2", "pass", "fail"]
    assert "9.1" not in report


def test_different_selections_of_one_split_compare_common_problems(tmp_path: Path, two_runs: tuple[Path, Path]) -> None:
    run_a, _ = two_runs
    d = make_run(tmp_path / "other", "delta", "validation", ["2", "3"])
    write_details(d, "2", attempt_record("2", ["fail", "pass", "pass"]))
    write_details(d, "3", attempt_record("3", ["pass", "skipped", "pass"]))
    report = compare_runs(run_a, d.run_dir)
    assert "**The selections differ: only the 2 problems selected in both runs are compared.**" in report
    assert row(report, "main_problem_resolve_rate")[1:] == ["1/2 (50.0%)", "1/2 (50.0%)", "+0.0 pp (+0)"]


def test_missing_run_directory(tmp_path: Path, two_runs: tuple[Path, Path]) -> None:
    missing = tmp_path / "results" / "scicode" / "nobody" / "nothing"
    with pytest.raises(CompareError, match=f"run directory not found: {missing}$"):
        compare_runs(two_runs[0], missing)


def test_run_directory_without_selection(tmp_path: Path, two_runs: tuple[Path, Path]) -> None:
    empty = tmp_path / "empty-run"
    empty.mkdir()
    with pytest.raises(CompareError, match=f"not a run directory: {empty / 'selection.json'} is missing"):
        compare_runs(empty, two_runs[1])
    (empty / "selection.json").write_text("{}", encoding="utf-8")
    with pytest.raises(CompareError, match="selection.json is invalid"):
        compare_runs(empty, two_runs[1])


def test_invalid_details_count_as_unresolved(two_runs: tuple[Path, Path]) -> None:
    run_a, run_b = two_runs
    (run_b / "details" / "2.json").write_text("{not json", encoding="utf-8")
    report = compare_runs(run_a, run_b)
    assert row(report, "main_problem_resolve_rate")[2] == "1/5 (20.0%)"
    assert row(report, "subproblem")[2] == "3/10 (30.0%)"
    assert row(report, "no valid details file")[2] == "1/5 (20.0%)"
    assert row(section(report, "### pass in A, not pass in B (4)"), "2.2") == ["2.2", "pass", "no_verdict"]


# ---------------------------------------------------------------------------
# Several attempts
# ---------------------------------------------------------------------------


def test_attempt_metrics_section(tmp_path: Path) -> None:
    results = tmp_path / "results"
    d = make_run(results, "delta", "validation", ["1", "5"], mode="naive")
    write_details(d, "1", attempt_record("1", ["pass", "pass"]), attempt_record("1", ["pass", "fail"]))
    write_details(d, "5", attempt_record("5", ["fail"]), attempt_record("5", ["fail"]))
    e = make_run(results, "epsilon", "validation", ["1", "5"], mode="naive")
    write_details(e, "1", attempt_record("1", ["pass", "pass"]), attempt_record("1", ["pass", "pass"]))
    write_details(e, "5", attempt_record("5", ["pass"]), attempt_record("5", ["fail"]))
    report = compare_runs(d.run_dir, e.run_dir)
    attempts = section(report, "## Attempts")
    # D outcomes [T, F], [F, F]; E outcomes [T, T], [T, F]
    assert row(attempts, "pass@1") == [
        "pass@1",
        "25.0% (mean over 2 problems)",
        "75.0% (mean over 2 problems)",
        "+50.0 pp",
    ]
    assert row(attempts, "pass@2") == [
        "pass@2",
        "50.0% (mean over 2 problems)",
        "100.0% (mean over 2 problems)",
        "+50.0 pp",
    ]
    assert row(attempts, "resolved by any attempt (pass)") == [
        "resolved by any attempt (pass)",
        "1/2 (50.0%)",
        "2/2 (100.0%)",
        "+50.0 pp (+1)",
    ]
    # D steps per attempt: 2/3 then 1/3 -> mean 50%; E: 3/3 then 2/3 -> mean 83.3%
    assert row(attempts, "mean subproblem (avg)") == [
        "mean subproblem (avg)",
        "50.0% (3 steps x 2 attempts)",
        "83.3% (3 steps x 2 attempts)",
        "+33.3 pp",
    ]
    # the headline metrics are those of the first attempt
    assert row(report, "main_problem_resolve_rate")[1:] == ["1/2 (50.0%)", "2/2 (100.0%)", "+50.0 pp (+1)"]


def test_attempt_metrics_unavailable_when_attempt_counts_differ(tmp_path: Path) -> None:
    results = tmp_path / "results"
    d = make_run(results, "delta", "validation", ["1", "5"])
    write_details(d, "1", attempt_record("1", ["pass", "pass"]), attempt_record("1", ["pass", "fail"]))
    write_details(d, "5", attempt_record("5", ["fail"]))
    e = make_run(results, "epsilon", "validation", ["1", "5"])
    write_details(e, "1", attempt_record("1", ["pass", "pass"]))
    write_details(e, "5", attempt_record("5", ["pass"]))
    attempts = section(compare_runs(d.run_dir, e.run_dir), "## Attempts")
    assert "Attempt metrics unavailable: A: attempt metrics need the same number of attempts" in attempts


# ---------------------------------------------------------------------------
# The written file
# ---------------------------------------------------------------------------


def test_write_comparison(two_runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_a, run_b = two_runs
    results = tmp_path / "results"
    settings = Settings(runs=(str(run_a), str(run_b)), results_dir=str(results))
    path = write_comparison(settings)
    assert path == (
        results / "scicode" / "compare" / "alpha--validation-tool_use-bg__vs__beta--validation-tool_use-bg.md"
    )
    assert path.read_text(encoding="utf-8") == compare_runs(run_a, run_b)
    assert str(path) in capsys.readouterr().out
    # the Markdown report, its HTML page and its record, no temp file left behind
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(
        [path.name, path.with_suffix(".html").name, path.with_suffix(".json").name]
    )
    assert "<title>SciCode comparison" in path.with_suffix(".html").read_text(encoding="utf-8")


def test_write_comparison_accepts_model_slash_run(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    results = tmp_path / "results"
    settings = Settings(runs=("alpha/validation-tool_use-bg", "beta/validation-tool_use-bg"), results_dir=str(results))
    assert write_comparison(settings).read_text(encoding="utf-8") == compare_runs(*two_runs)


def test_write_comparison_needs_two_runs(tmp_path: Path, two_runs: tuple[Path, Path]) -> None:
    with pytest.raises(CompareError, match="expected exactly two run folders"):
        write_comparison(Settings(runs=(str(two_runs[0]),), results_dir=str(tmp_path)))
    with pytest.raises(CompareError, match="run directory not found: nowhere/run"):
        write_comparison(Settings(runs=(str(two_runs[0]), "nowhere/run"), results_dir=str(tmp_path / "results")))


def test_run_without_config_uses_folder_names(two_runs: tuple[Path, Path]) -> None:
    run_a, run_b = two_runs
    (run_b / "config.json").unlink()
    report = compare_runs(run_a, run_b)
    assert row(report, "model") == ["model", "`alpha`", "`beta`"]
    assert row(report, "mode") == ["mode", "tool_use", "(unknown)"]
    assert row(report, "with_background") == ["with_background", "true", "(unknown)"]
    assert row(report, "main_problem_resolve_rate")[2] == "2/5 (40.0%)"


# ---------------------------------------------------------------------------
# The command line's own sample_ids and category
# ---------------------------------------------------------------------------


def test_compare_narrows_to_its_own_sample_ids(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    run_a, run_b = two_runs
    results = tmp_path / "results"
    full = write_comparison(Settings(runs=(str(run_a), str(run_b)), results_dir=str(results)))
    before = full.read_text(encoding="utf-8")
    narrowed = write_comparison(
        Settings(runs=(str(run_a), str(run_b)), results_dir=str(results), sample_ids=("1", "2"))
    )
    assert narrowed.name == full.name.removesuffix(".md") + "-ids-1_2.md"
    report = narrowed.read_text(encoding="utf-8")
    assert row(report, "main_problem_total")[1:3] == ["2", "2"]
    assert row(report, "main_problem_resolve_rate")[1:] == ["1/2 (50.0%)", "1/2 (50.0%)", "+0.0 pp (+0)"]
    assert "**Narrowed to sample_ids=1,2: 2 of the problems both runs selected.**" in report
    assert "5.1" not in section(report, "### pass in A, not pass in B (1)")
    record = read_artifact(narrowed.with_suffix(".json"), "compare")
    assert record is not None and record["compared_problems"] == ["1", "2"]
    assert record["narrowed_to"] == "sample_ids=1,2"
    # the full comparison is a file of its own, never replaced by a narrowed one
    assert full.read_text(encoding="utf-8") == before and "main_problem_total | 5 | 5" in before


def test_compare_narrows_to_its_own_category(two_runs: tuple[Path, Path]) -> None:
    report = compare_runs(*two_runs, categories=("physics",))  # problem 2 is the only Physics problem
    assert row(report, "main_problem_total")[1:3] == ["1", "1"]
    assert "**Narrowed to category=physics: 1 of the problems both runs selected.**" in report
    both = compare_runs(*two_runs, sample_ids=("1", "2", "9"), categories=("physics",))
    assert row(both, "main_problem_total")[1:3] == ["1", "1"]
    assert "- sample_ids not selected in both runs (1): 9" in both
    assert row(report, "main_problem_resolve_rate")[1:3] == ["0/1 (0.0%)", "1/1 (100.0%)"]
    with pytest.raises(CompareError, match="matches sample_ids=9$"):
        compare_runs(*two_runs, sample_ids=("9",))


def test_compare_reads_the_view_its_sample_ids_name(two_runs: tuple[Path, Path]) -> None:
    """A run folder holding that subset's own selection is compared on it, whatever subset ran last."""
    run_a, run_b = two_runs
    for run in (run_a, run_b):
        full = RunPaths(run).selection
        view = RunPaths(run, "ids-1_2").selection
        record = read_artifact(full, "selection")
        assert record is not None
        record["problems"] = [entry for entry in json_objects(record["problems"]) if entry["problem_id"] in ("1", "2")]
        write_artifact(view, "selection", {key: value for key, value in record.items() if key != "schema_version"})
        latest = RunPaths(run, "ids-1").selection
        record["problems"] = json_list(record["problems"])[:1]
        write_artifact(latest, "selection", {key: value for key, value in record.items() if key != "schema_version"})
        full.unlink()  # the folder only ever ran subsets; `ids-1` ran last
    assert row(compare_runs(run_a, run_b), "main_problem_total")[1:3] == ["1", "1"]
    narrowed = compare_runs(run_a, run_b, sample_ids=("1", "2"))
    assert row(narrowed, "main_problem_total")[1:3] == ["2", "2"]
    assert row(narrowed, "problems selected")[1:] == ["2", "2"]


def test_the_record_holds_what_the_markdown_shows(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    run_a, run_b = two_runs
    path = write_comparison(Settings(runs=(str(run_a), str(run_b)), results_dir=str(tmp_path / "results")))
    record = read_comparison_record(path.with_suffix(".json"))
    assert record is not None and ComparisonRecord.from_record(freeze_object(record.to_record())) == record
    assert record.compared_problems == ("1", "2", "3", "4", "5") and record.narrowed_to is None
    assert (record.problems_lost, record.problems_gained) == (("1", "5"), ("2",))
    assert [(flip.step_id, flip.status_a, flip.status_b) for flip in record.steps_gained] == [("2.1", "fail", "pass")]
    assert [(flip.step_id, flip.status_b) for flip in record.steps_lost] == [("1.2", "fail"), ("5.1", "no_verdict")]
    a, b = record.run_a, record.run_b
    assert (a.model, b.model, a.counts.resolved, b.counts.resolved) == ("alpha", "beta", 3, 2)
    assert (a.counts.steps_passed, a.counts.steps_scored, a.counts.no_details, b.counts.errors) == (7, 10, 1, 1)
    assert dict(b.statuses)["timeout"] == 1 and dict(a.statuses)["no_verdict"] == 2
    # tokens of the attempts reporting both usage and latency: A's problem 1 (details) and 2 (generation), 5
    assert (a.cost.input_tokens, a.cost.calls, a.cost.attempts_reporting, a.cost.attempts_total) == (131, 7, 3, 5)
    assert record.paired.problems == ("1", "2", "3") and record.paired.only_scored_a == ("5",)
    assert (record.paired.resolved_only_a, record.paired.resolved_only_b) == (1, 1)


def test_odd_reported_costs_never_stop_the_record(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    """Usage and latency come from what a server reported: negative figures are recorded as they are."""
    run_a, run_b = two_runs
    odd = attempt_record("1", ["pass", "pass"], usage=usage(-5, -1, 1), latency_s=-2.0)
    write_details(RunPaths(run_a), "1", odd)
    path = write_comparison(Settings(runs=(str(run_a), str(run_b)), results_dir=str(tmp_path / "results")))
    record = read_comparison_record(path.with_suffix(".json"))
    assert record is not None and record.run_a.cost.input_tokens == 26 and record.run_a.cost.latency_s == -0.75


def test_two_long_run_names_give_a_comparison_whose_file_names_fit(tmp_path: Path) -> None:
    """Issue 39, finding 7: two runs named near the file-name limit made `<A>__vs__<B>.md` too long for any file
    system (a traceback); the names are bounded, by head and digest, and two such comparisons stay apart."""
    results = tmp_path / "results"
    runs = []
    for model in ("m" * 120 + "-alpha", "m" * 120 + "-beta"):
        paths = make_run(results, model, "validation", ["1"], run="r" * 120 + "-validation")
        write_details(paths, "1", attempt_record("1", ["pass", "pass"]))
        runs.append(paths.run_dir)
    path = write_comparison(Settings(runs=tuple(str(run) for run in runs), results_dir=str(results)))
    for written in (path, path.with_suffix(".html"), path.with_suffix(".json")):
        assert written.is_file() and len(written.name) <= 255
    swapped = write_comparison(Settings(runs=tuple(str(run) for run in reversed(runs)), results_dir=str(results)))
    assert swapped != path and len(swapped.name) == len(path.name)


def test_a_model_name_longer_than_a_file_name_gets_a_bounded_run_folder(tmp_path: Path) -> None:
    long_model = "acme/" + "x" * 400
    folder = Settings(model=long_model, results_dir=str(tmp_path)).run_paths.run_dir.parent
    assert len(folder.name) == 255 and folder.name.startswith("acme_xxx")
    other = Settings(model=long_model + "y", results_dir=str(tmp_path)).run_paths.run_dir.parent
    assert other != folder
    assert Settings(model="acme/short", results_dir=str(tmp_path)).run_paths.run_dir.parent.name == "acme_short"


def test_the_same_model_is_never_called_a_difference(tmp_path: Path) -> None:
    """Two runs of one model: the line says the model is the same, never "Besides the model"."""
    results = tmp_path / "results"
    a = make_run(results, "alpha", "validation", ["1"], run="first")
    b = make_run(results, "alpha", "validation", ["1"], run="second", step_timeout_seconds=30.0)
    for paths in (a, b):
        write_details(paths, "1", attempt_record("1", ["pass"]))
    assert (
        compare_runs(a.run_dir, b.run_dir).splitlines()[2] == "Same model; 1 setting(s) differ: `step_timeout_seconds`."
    )
    c = make_run(results, "alpha", "validation", ["1"], run="third")
    write_details(c, "1", attempt_record("1", ["pass"]))
    assert compare_runs(a.run_dir, c.run_dir).splitlines()[2] == "Same model and settings."


def test_derived_or_official_targets_are_said_plainly() -> None:
    """What each run was scored against is one plain line of the comparison, a warning unless both are official."""
    import dataclasses

    from stages.compare.comparison import RunInfo, targets_note

    base = RunInfo(Path("a"), "m", "r", "validation", "naive", "true", (), None)  # type: ignore[arg-type]
    official, derived = dataclasses.replace(base, targets="official"), dataclasses.replace(base, targets="derived")
    assert targets_note(official, official) == ("text", "Both runs were scored against the official test_data.h5.")
    assert targets_note(official, derived) == (
        "warning",
        "The runs were scored against different targets: A against the official test_data.h5, B against targets "
        "derived from the reference code (not the official test_data.h5).",
    )
    assert targets_note(derived, derived)[0] == "warning"
