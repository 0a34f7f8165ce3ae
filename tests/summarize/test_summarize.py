"""The summarize stage against schema-valid details files written here, and against the real problem files."""

from __future__ import annotations

import base64
import gzip
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from stages.benchmark.problems import Problem, load_problems
from stages.config.settings import Settings
from stages.select.stage import step_layout
from stages.storage.artifacts import read_artifact, write_artifact
from stages.storage.json_values import JSONObject
from stages.storage.paths import DataPaths
from stages.summarize.stage import (
    SummarizeError,
    run_summarize,
    summary_fingerprint,
    summary_is_current,
)
from tests.support.hostile import ESCAPES, FAKE_TABLE
from tests.support.run_artifacts import (
    DERIVED,
    FIXED_NOW,
    OFFICIAL,
    ZERO_SHA,
    json_at,
    json_object,
    json_objects,
    make_settings,
    read_record,
    selection_entry,
    step_verdict,
    without_code_spans,
    write_details,
    write_selection,
)


def write_generation(settings: Settings, problem_id: str, usage: JSONObject, latency_s: float) -> None:
    write_artifact(
        settings.run_paths.generation(problem_id),
        "generation",
        {
            "fingerprint": ZERO_SHA,
            "status": "complete",
            "problem_id": problem_id,
            "attempt": 0,
            "model": settings.model,
            "mode": "naive",
            "error": None,
            "usage": usage,
            "latency_s": latency_s,
            "steps": [],
        },
    )


# ---------------------------------------------------------------------------
# A mixed run, counted by hand
# ---------------------------------------------------------------------------
# P1 physics    3 steps: pass pass pass                       -> resolved, 3/3
# P2 physics    4 steps (last unscored): pass fail timeout skipped -> 1/3
# P3 chemistry  2 steps: parse_error eval_error               -> 0/2, scoring failed (eval_error)
# P4 chemistry  3 steps, generation_error: pass pass (step 3 absent) -> Error, 2/3, one no_verdict
# P5 physics    2 steps, no details file                      -> Error, 0/2, two no_verdict
# Total 5, Evaluated 5, Error 2, resolved 1; steps 6/13, skipped 1.


@pytest.fixture
def mixed_run(tmp_path: Path) -> Settings:
    settings = make_settings(tmp_path)
    write_selection(
        settings,
        [
            selection_entry("P1", "physics", 3, 3),
            selection_entry("P2", "physics", 4, 3),
            selection_entry("P3", "chemistry", 2, 2),
            selection_entry("P4", "chemistry", 3, 3),
            selection_entry("P5", "physics", 2, 2),
        ],
    )
    write_details(
        settings,
        "P1",
        "physics",
        [("P1.1", "pass"), ("P1.2", "pass"), ("P1.3", "pass")],
        meta={"usage": {"input_tokens": 100, "output_tokens": 50, "total_tokens": 150, "calls": 3}, "latency_s": 2.5},
    )
    write_details(
        settings, "P2", "physics", [("P2.1", "pass"), ("P2.2", "fail"), ("P2.3", "timeout"), ("P2.4", "skipped")]
    )
    write_generation(settings, "P2", {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15, "calls": 2}, 1.0)
    write_details(settings, "P3", "chemistry", [("P3.1", "parse_error"), ("P3.2", "eval_error")])
    write_details(
        settings,
        "P4",
        "chemistry",
        [("P4.1", "pass"), ("P4.2", "pass")],
        status="generation_error",
        error="APIConnectionError at step P4.3 after 6 retries",
    )
    return settings


def test_mixed_run_counts_match_hand_computed(mixed_run: Settings) -> None:
    outcome = run_summarize(mixed_run, targets=OFFICIAL, now=FIXED_NOW)
    record = read_artifact(mixed_run.run_paths.summary_json, "summary")
    assert record is not None, "summary.json must validate against its schema"

    assert (outcome.total, outcome.evaluated, outcome.errors, outcome.resolved) == (5, 5, 2, 1)
    assert (outcome.subproblem_correct, outcome.subproblem_total, outcome.skipped_steps) == (6, 13, 1)
    assert outcome.failed_problems == ("P3", "P4", "P5")
    assert record["Total"] == 5 and record["Evaluated"] == 5 and record["Error"] == 2
    assert record["main_problem_resolved"] == 1 and record["main_problem_total"] == 5
    assert record["subproblem_correct"] == 6 and record["subproblem_total"] == 13
    assert record["main_problem_resolve_rate"] == pytest.approx(1 / 5)
    assert record["subproblem"] == pytest.approx(6 / 13)
    assert record["status_counts"] == {
        "pass": 6,
        "fail": 1,
        "timeout": 1,
        "parse_error": 1,
        "eval_error": 1,
        "skipped": 1,
        "not_generated": 0,
        "no_verdict": 3,
    }
    assert json_object(json_at(record, "by_category", "physics")) == {
        "main_problem_resolve_rate": pytest.approx(1 / 3),
        "subproblem": pytest.approx(4 / 8),
        "Total": 3,
        "Evaluated": 3,
        "Error": 1,
        "main_problem_resolved": 1,
        "main_problem_total": 3,
        "subproblem_correct": 4,
        "subproblem_total": 8,
        "skipped_steps": 1,
        "intervals": None,  # 3 problems: counts only
    }
    chemistry = json_object(json_at(record, "by_category", "chemistry"))
    assert (chemistry["Total"], chemistry["Error"], chemistry["main_problem_resolved"]) == (2, 1, 0)
    assert (chemistry["subproblem_correct"], chemistry["subproblem_total"]) == (2, 5)
    assert list(json_object(record["by_category"])) == ["physics", "chemistry"]
    assert [f["problem_id"] for f in json_objects(record["failed_problems"])] == ["P3", "P4", "P5"]
    assert record["status"] == "partial"
    assert record["targets"] == {"kind": "official", "note": "data/scicode/test_data.h5"}


def test_mixed_run_headline_intervals_by_hand(mixed_run: Settings) -> None:
    run_summarize(mixed_run, targets=OFFICIAL, now=FIXED_NOW)
    record = read_record(mixed_run.run_paths.summary_json, "summary")
    resolve, steps = record["intervals"]["main_problem_resolve_rate"], record["intervals"]["subproblem"]
    # Wilson, 1 of 5: centre = (1 + 1.920729) / 8.841459 = 0.330345,
    # half = 0.221679 * sqrt(1 * 4 / 5 + 0.960365) = 0.221679 * 1.326787 = 0.294120 -> [0.036225, 0.624465]
    assert (resolve["low"], resolve["high"]) == (pytest.approx(0.036225, abs=2e-6), pytest.approx(0.624465, abs=2e-6))
    # steps (passed, scored): P1 3/3, P2 1/3, P3 0/2, P4 2/3, P5 0/2; N = 13, p = 6/13 = 0.461538
    # passed - p * steps: 1.615385, -0.384615, -0.923077, 0.615385, -0.923077
    # squares: 2.609467 + 0.147929 + 0.852071 + 0.378698 + 0.852071 = 4.840237
    # SE = sqrt(4.840237) / 13 = 2.200054 / 13 = 0.169235: V_cl = 0.028640, V_bin = p (1 - p) / 13 = 0.019117,
    # deff = 1.498168 (within [1, (9 + 9 + 4 + 9 + 4) / 13 = 2.692308]), n_eff = 13 / 1.498168 = 8.677262
    # Wilson of p on n_eff: z^2 / n_eff = 0.442704, centre = (p + 0.221352) / 1.442704 = 0.473341,
    # half = z / 1.442704 * sqrt(p (1 - p) / n_eff + 0.442704 / (4 n_eff)) = 0.276405 -> [0.196936, 0.749746]
    assert steps["se"] == pytest.approx(0.169235, abs=1e-6)
    assert steps["method"] == "clustered_wilson" and steps["effective_n"] == pytest.approx(8.677262, abs=1e-6)
    assert steps["design_effect"] == pytest.approx(1.498168, abs=1e-6) and steps["design_effect_estimated"]
    assert (steps["low"], steps["high"]) == (pytest.approx(0.196936, abs=2e-6), pytest.approx(0.749746, abs=2e-6))
    assert record["uncertainty"]["min_group_problems"] == 5
    assert record["uncertainty"]["subproblem"].startswith("clustered Wilson")
    text = mixed_run.run_paths.summary_md.read_text(encoding="utf-8")
    assert "| main_problem_resolve_rate |  1/5 (20.0%) | 3.6% to 62.4% (Wilson)" in text
    assert (
        "| subproblem                | 6/13 (46.2%) | 19.7% to 75.0% (clustered Wilson, effective n 8.7 of 13 steps)"
        in text
    )
    assert "subproblem (and pass@k) the clustered Wilson interval" in text
    assert "Rows of fewer than 5 problems show their counts only (no interval)." in text


def boundary_run(tmp_path: Path, outcomes: Sequence[Sequence[str]]) -> Settings:
    """A run of one problem per entry of `outcomes`, each the statuses of its scored steps."""
    settings = make_settings(tmp_path)
    ids = [f"B{n}" for n in range(1, len(outcomes) + 1)]
    write_selection(
        settings, [selection_entry(pid, "optics", len(steps), len(steps)) for pid, steps in zip(ids, outcomes)]
    )
    for pid, steps in zip(ids, outcomes):
        write_details(settings, pid, "optics", [(f"{pid}.{i + 1}", status) for i, status in enumerate(steps)])
    return settings


@pytest.mark.parametrize(
    ("outcomes", "resolve", "steps"),
    [
        # 0/n (the issue's `steps 0/2 (0.0%) [95% 0.0% to 0.0%]`): two problems, so n_eff = 2 for the steps:
        # [0, z^2 / (2 + z^2)] = [0, 65.8%]; Wilson of 0 of 2 problems the same
        (
            (("fail",), ("fail",)),
            "resolved 0/2 (0.0%) [95% Wilson 0.0% to 65.8%]",
            "steps 0/2 (0.0%) [95% clustered Wilson 0.0% to 65.8%]",
        ),
        # n/n: 5 of 5 steps over 2 problems: [2 / (2 + z^2), 1] = [34.2%, 100%] for both
        (
            (("pass", "pass"), ("pass", "pass", "pass")),
            "resolved 2/2 (100.0%) [95% Wilson 34.2% to 100.0%]",
            "steps 5/5 (100.0%) [95% clustered Wilson 34.2% to 100.0%]",
        ),
        # one problem, 2 of 3 steps: n_eff = 1: [9.4%, 97.5%]; its resolve rate 0 of 1: [0, 1 / (1 + z^2)]
        (
            (("pass", "pass", "fail"),),
            "resolved 0/1 (0.0%) [95% Wilson 0.0% to 79.3%]",
            "steps 2/3 (66.7%) [95% clustered Wilson 9.4% to 97.5%]",
        ),
    ],
)
def test_terminal_line_and_summary_never_show_a_zero_width_interval(
    tmp_path: Path, outcomes: Sequence[Sequence[str]], resolve: str, steps: str
) -> None:
    settings = boundary_run(tmp_path, outcomes)
    outcome = run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    assert f": {resolve}, {steps}, " in outcome.one_line
    record = read_record(settings.run_paths.summary_json, "summary")
    for rate in record["intervals"].values():
        assert rate["high"] > rate["low"]
    text = settings.run_paths.summary_md.read_text(encoding="utf-8")
    assert not re.search(r"(\d+\.\d)% to \1%", text), "an interval of zero width in summary.md"
    shown = steps.split("[95% clustered Wilson ")[1].rstrip("]")
    steps_row = next(line for line in text.splitlines() if line.startswith("| subproblem "))
    effective = record["intervals"]["subproblem"]["effective_n"]
    assert f"{shown} (clustered Wilson, effective n {effective:.1f} of " in steps_row


def test_groups_of_five_problems_get_intervals(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    ids = [f"Q{n}" for n in range(1, 7)]
    write_selection(
        settings, [selection_entry(pid, "optics" if n < 5 else "acoustics", 1, 1) for n, pid in enumerate(ids)]
    )
    for n, pid in enumerate(ids):
        write_details(settings, pid, "optics" if n < 5 else "acoustics", [(f"{pid}.1", "pass" if n < 2 else "fail")])
    run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    record = read_record(settings.run_paths.summary_json, "summary")
    optics, acoustics = record["by_category"]["optics"], record["by_category"]["acoustics"]
    assert optics["intervals"]["main_problem_resolve_rate"]["problems"] == 5  # 2 of 5: [0.117621, 0.769277]
    assert optics["intervals"]["main_problem_resolve_rate"]["low"] == pytest.approx(0.117621, abs=2e-6)
    assert acoustics["intervals"] is None
    section = settings.run_paths.summary_md.read_text(encoding="utf-8").split("## By subfield", 1)[1]
    optics_row = next(line for line in section.splitlines() if "| optics " in line)
    # steps: 2 of 5 one-step problems, so the clustered Wilson interval is the plain one, as for the resolve rate
    assert [cell.strip() for cell in optics_row.split("|")[3:7]] == [
        "2/5 (40.0%)",
        "11.8% to 76.9%",
        "2/5 (40.0%)",
        "11.8% to 76.9%",
    ]
    acoustics_row = next(line for line in section.splitlines() if "| acoustics " in line)
    assert [cell.strip() for cell in acoustics_row.split("|")[3:7]] == ["0/1 (0.0%)", "-", "0/1 (0.0%)", "-"]
    assert "95% interval (Wilson)" in section and "95% interval (clustered Wilson)" in section


def test_mixed_run_problem_rows(mixed_run: Settings) -> None:
    run_summarize(mixed_run, targets=OFFICIAL, now=FIXED_NOW)
    problems = {p["problem_id"]: p for p in read_record(mixed_run.run_paths.summary_json, "summary")["problems"]}
    assert [p for p in problems] == ["P1", "P2", "P3", "P4", "P5"]
    assert problems["P1"]["resolved"] and problems["P1"]["first_failure"] is None
    assert problems["P2"]["first_failure"]["step_id"] == "P2.2" and problems["P2"]["first_failure"]["status"] == "fail"
    assert (problems["P2"]["steps_passed"], problems["P2"]["steps_scored"], problems["P2"]["steps_skipped"]) == (
        1,
        3,
        1,
    )
    assert problems["P3"]["error"].startswith("step P3.2: eval_error")
    assert problems["P4"]["state"] == "generation_error" and not problems["P4"]["resolved"]
    assert problems["P4"]["first_failure"]["status"] == "no_verdict"
    assert problems["P4"]["error"] == "APIConnectionError at step P4.3 after 6 retries"
    assert problems["P5"]["state"] == "missing_details"
    assert [s["status"] for s in problems["P5"]["steps"]] == ["no_verdict", "no_verdict"]


def test_usage_and_latency_from_details_then_generation(mixed_run: Settings) -> None:
    run_summarize(mixed_run, targets=OFFICIAL, now=FIXED_NOW)
    record = read_record(mixed_run.run_paths.summary_json, "summary")
    assert record["usage"] == {
        "input_tokens": 110,
        "output_tokens": 55,
        "total_tokens": 165,
        "calls": 5,
        "problems_reporting": 2,
    }
    assert record["latency_s"] == pytest.approx(3.5)


def test_markdown_shows_denominators_failures_and_definitions(mixed_run: Settings) -> None:
    run_summarize(mixed_run, targets=OFFICIAL, now=FIXED_NOW)
    text = mixed_run.run_paths.summary_md.read_text(encoding="utf-8")
    assert "| main_problem_resolve_rate |  1/5 (20.0%) |" in text
    assert "6/13 (46.2%)" in text
    assert "5 / 5 / 2" in text  # Total / Evaluated / Error
    for raw in ("main_problem_resolved", "main_problem_total", "subproblem_correct", "subproblem_total"):
        assert raw in text
    failed_section = text.split("## Problems whose generation or scoring failed", 1)[1].split("##", 1)[0]
    assert "- P3 (complete): `step P3.2: eval_error" in failed_section  # reasons in code spans
    assert "- P4 (generation_error): `APIConnectionError" in failed_section
    assert "- P5 (missing_details): `no details file" in failed_section
    assert "[^defs]: Definitions." in text and "Evaluated: equal to Total" in text
    assert "| P2      | test  | physics   |          1/3 | no       | P2.2 (fail)" in text
    assert "summarized at: 2025-01-02T03:04:05Z" in text
    assert "official test_data.h5" in text
    for plot in ("plots/step_status_grid.png", "plots/status_counts.png", "plots/pass_rate_by_category.png"):
        assert f"]({plot})" in text
    assert "targets derived" not in text


def test_derived_targets_stated_in_the_first_lines(mixed_run: Settings) -> None:
    outcome = run_summarize(mixed_run, targets=DERIVED, now=FIXED_NOW)
    first_lines = "\n".join(mixed_run.run_paths.summary_md.read_text(encoding="utf-8").splitlines()[:4])
    assert "targets derived from reference code, not the official test_data.h5" in first_lines
    assert "targets derived from reference code" in outcome.one_line
    assert read_record(mixed_run.run_paths.summary_json, "summary")["targets"]["kind"] == "derived"


def test_run_started_is_the_earliest_details_or_generation_time(mixed_run: Settings) -> None:
    paths = mixed_run.run_paths
    import os

    os.utime(paths.details("P3"), (1_600_000_000, 1_600_000_000))
    run_summarize(mixed_run, targets=OFFICIAL, now=FIXED_NOW)
    assert read_record(paths.summary_json, "summary")["run_started"] == "2020-09-13T12:26:40Z"


def test_fingerprint_tracks_details_files(mixed_run: Settings) -> None:
    run_summarize(mixed_run, targets=OFFICIAL, now=FIXED_NOW)
    assert read_record(mixed_run.run_paths.summary_json, "summary")["fingerprint"] == summary_fingerprint(mixed_run)
    assert summary_is_current(mixed_run)
    write_details(mixed_run, "P5", "physics", [("P5.1", "pass"), ("P5.2", "pass")])
    assert not summary_is_current(mixed_run)
    outcome = run_summarize(mixed_run, targets=OFFICIAL, now=FIXED_NOW)
    assert summary_is_current(mixed_run)
    assert (outcome.errors, outcome.resolved, outcome.subproblem_correct) == (1, 2, 8)
    (mixed_run.run_paths.plots_dir / "status_counts.png").unlink()
    assert not summary_is_current(mixed_run)


def test_fingerprint_covers_the_interval_methods(mixed_run: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A summary written with other interval methods is not current: it is made again, its intervals with it."""
    import stages.summarize.stage
    from stages.numbers.uncertainty.intervals import methods_record

    run_summarize(mixed_run, targets=OFFICIAL, now=FIXED_NOW)
    assert summary_is_current(mixed_run)
    current = methods_record()
    monkeypatch.setattr(stages.summarize.stage, "methods_record", lambda: {**current, "subproblem": "another method"})
    assert not summary_is_current(mixed_run)


def test_invalid_details_file_is_an_error_never_dropped(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    write_selection(settings, [selection_entry("A", "x", 2, 2), selection_entry("B", "x", 1, 1)])
    write_details(settings, "A", "x", [("A.1", "pass"), ("A.2", "pass")])
    settings.run_paths.details("B").write_text("{not json", encoding="utf-8")
    outcome = run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    assert (outcome.total, outcome.errors, outcome.resolved) == (2, 1, 1)
    assert (outcome.subproblem_correct, outcome.subproblem_total) == (2, 3)
    assert outcome.failed_problems == ("B",)
    row = read_record(settings.run_paths.summary_json, "summary")["problems"][1]
    assert row["state"] == "invalid_details" and "does not validate" in row["error"]


def test_details_of_another_problem_are_invalid(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    write_selection(settings, [selection_entry("A", "x", 1, 1)])
    path = write_details(settings, "Z", "x", [("Z.1", "pass")])
    path.rename(settings.run_paths.details("A"))
    outcome = run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    assert (outcome.errors, outcome.resolved, outcome.subproblem_correct) == (1, 0, 0)


def test_missing_selection_is_one_clear_error(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    with pytest.raises(SummarizeError, match=r"selection\.json.*doit select"):
        run_summarize(settings, targets=OFFICIAL)


# ---------------------------------------------------------------------------
# Denominators from the real problem files
# ---------------------------------------------------------------------------


def real_entries(problems: Sequence[Problem]) -> list[dict[str, Any]]:
    return [
        selection_entry(
            p.problem_id, p.category, len(p.steps), len(p.scored_steps), p.split, p.fingerprint, step_layout(p)
        )
        for p in problems
    ]


def write_all_pass(settings: Settings, problems: Sequence[Problem]) -> None:
    for problem in problems:
        write_details(
            settings,
            problem.problem_id,
            problem.category,
            [(s.step_id, "skipped" if s.prefilled else "pass") for s in problem.steps],
        )


@pytest.mark.parametrize(
    ("split", "problems", "scored", "skipped"),
    [("all", 80, 338, 3), ("test", 65, 288, 3), ("validation", 15, 50, 0)],
)
def test_denominators_come_from_the_problem_data(
    tmp_path: Path, shared_scicode: Path, split: str, problems: int, scored: int, skipped: int
) -> None:
    data_dir = shared_scicode.parent
    settings = make_settings(tmp_path, data_dir, split=split)
    chosen = load_problems(DataPaths(data_dir), split)
    write_selection(settings, real_entries(chosen))
    write_all_pass(settings, chosen)
    outcome = run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    record = read_record(settings.run_paths.summary_json, "summary")
    assert (outcome.total, outcome.resolved, outcome.errors) == (problems, problems, 0)
    assert (outcome.subproblem_correct, outcome.subproblem_total, outcome.skipped_steps) == (scored, scored, skipped)
    assert record["status_counts"]["skipped"] == skipped and record["status_counts"]["pass"] == scored
    assert f"| subproblem                | {scored}/{scored} (100.0%) |" in settings.run_paths.summary_md.read_text()
    assert record["failed_problems"] == [] and record["status"] == "complete"


def test_missing_details_keep_prefilled_steps_skipped(tmp_path: Path, shared_scicode: Path) -> None:
    """Problem 13 (with prefilled step 13.6) never scored: still 338 scored and 3 skipped in the denominators."""
    data_dir = shared_scicode.parent
    settings = make_settings(tmp_path, data_dir, split="all")
    chosen = load_problems(DataPaths(data_dir), "all")
    write_selection(settings, real_entries(chosen))
    write_all_pass(settings, [p for p in chosen if p.problem_id != "13"])
    outcome = run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    record = read_record(settings.run_paths.summary_json, "summary")
    assert (outcome.subproblem_total, outcome.skipped_steps) == (338, 3)
    assert outcome.subproblem_correct == 338 - 14 and record["status_counts"]["no_verdict"] == 14
    assert (outcome.total, outcome.errors, outcome.resolved) == (80, 1, 79)
    row = next(p for p in record["problems"] if p["problem_id"] == "13")
    assert [s["step_id"] for s in row["steps"] if s["status"] == "skipped"] == ["13.6"]
    assert record["by_split"]["test"]["subproblem_total"] == 288
    assert record["by_split"]["validation"]["subproblem_correct"] == 50
    assert outcome.failed_problems == ("13",)
    assert json.loads(settings.run_paths.summary_json.read_text())["Error"] == 1


# ---------------------------------------------------------------------------
# Several attempts, real targets resolution, determinism, recorded settings
# ---------------------------------------------------------------------------


def write_attempts(settings: Settings, problem_id: str, attempts: Sequence[Sequence[tuple[str, str]]]) -> None:
    write_details(settings, problem_id, "x", attempts[0])
    record = json.loads(settings.run_paths.details(problem_id).read_text())
    first = record["attempts"][0]
    for steps in attempts[1:]:
        verdicts = [step_verdict(step_id, status) for step_id, status in steps]
        attempt = json.loads(json.dumps(first))
        attempt["meta"]["evaluation"]["steps"] = verdicts
        attempt["correct"] = all(v["correct"] for v in verdicts)
        record["attempts"].append(attempt)
    record.pop("schema_version")
    write_artifact(settings.run_paths.details(problem_id), "details", record)


def test_several_attempts_add_pass_at_k_and_both_strategies(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, attempts="2", attempt_strategy="pass")
    write_selection(
        settings, [selection_entry("A", "x", 2, 2), selection_entry("B", "x", 1, 1), selection_entry("C", "x", 1, 1)]
    )
    write_attempts(settings, "A", [[("A.1", "pass"), ("A.2", "fail")], [("A.1", "pass"), ("A.2", "pass")]])
    write_attempts(settings, "B", [[("B.1", "pass")], [("B.1", "fail")]])
    outcome = run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    assert (outcome.resolved, outcome.subproblem_correct, outcome.subproblem_total) == (1, 2, 4)  # attempt 1
    attempts = read_record(settings.run_paths.summary_json, "summary")["attempts"]
    assert attempts["strategy"] == "pass" and attempts["attempts"] == 2
    assert attempts["any_attempt"]["main_problem_resolved"] == 2  # A (2nd attempt), B (1st); C never
    assert attempts["any_attempt"]["subproblem_correct"] == 3
    assert attempts["pass_at_k"]["1"] == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    assert attempts["pass_at_k"]["2"] == pytest.approx(2 / 3)
    text = settings.run_paths.summary_md.read_text()
    assert "| any attempt (strategy pass)       |               2/3 (66.7%) | 3/4 (75.0%) |" in text
    assert "Configured attempt_strategy=pass: main_problem_resolve_rate 66.7%" in text


def test_single_attempt_has_no_attempts_section(mixed_run: Settings) -> None:
    run_summarize(mixed_run, targets=OFFICIAL, now=FIXED_NOW)
    assert read_record(mixed_run.run_paths.summary_json, "summary")["attempts"] is None
    assert "## Attempts" not in mixed_run.run_paths.summary_md.read_text()


def test_targets_are_resolved_by_the_targets_stage_when_not_given(mixed_run: Settings) -> None:
    pytest.importorskip("stages.targets")
    outcome = run_summarize(mixed_run, now=FIXED_NOW)  # no download manifest, no derived targets: missing
    assert outcome.targets_kind == "missing"
    first_lines = mixed_run.run_paths.summary_md.read_text().splitlines()[:4]
    assert any(line.startswith("**Note: no targets file") for line in first_lines)


def test_summaries_of_the_same_inputs_are_identical(mixed_run: Settings, tmp_path: Path) -> None:
    run_summarize(mixed_run, targets=OFFICIAL, now=FIXED_NOW)
    paths = mixed_run.run_paths
    first = {p.name: p.read_bytes() for p in [paths.summary_md, paths.summary_json, *paths.plots_dir.glob("*.png")]}
    run_summarize(mixed_run, targets=OFFICIAL, now=FIXED_NOW)
    second = {p.name: p.read_bytes() for p in [paths.summary_md, paths.summary_json, *paths.plots_dir.glob("*.png")]}
    assert first == second and len(first) == 5


def test_recorded_settings_come_from_config_json(mixed_run: Settings) -> None:
    from stages.select.stage import write_run_config

    write_run_config(mixed_run)
    run_summarize(mixed_run, targets=OFFICIAL, now=FIXED_NOW)
    text = mixed_run.run_paths.summary_md.read_text()
    settings_line = next(line for line in text.splitlines() if line.startswith("- settings: "))
    assert "api_protocol=openai-chat" in settings_line and "step_timeout_seconds=1800.0" in settings_line


HOSTILE_REASON = (
    f"test 1 failed: {ESCAPES} {FAKE_TABLE} ``x`` | a | b |\n## Scores\n| main_problem_resolve_rate | 15/15 |"
)


def page_and_step_views(page: str) -> str:
    blobs = re.findall(r'data-encoding="gzip\+base64">([^<]*)</script>', page)
    return page + "".join(gzip.decompress(base64.b64decode(blob)).decode("utf-8") for blob in blobs)


def test_hostile_reasons_reach_neither_summary_md_nor_report_html_raw(tmp_path: Path) -> None:
    # issue 20: escape sequences that rewrite "(fail)" into "(pass)" under `cat`, OSC 52, a forged table
    settings = make_settings(tmp_path)
    write_selection(settings, [selection_entry("P1", "physics", 2, 2)])
    write_details(
        settings,
        "P1",
        "physics",
        [("P1.1", "pass"), ("P1.2", "fail")],
        status="generation_error",
        error=HOSTILE_REASON,
        reasons={"P1.2": HOSTILE_REASON},
    )
    run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    text = settings.run_paths.summary_md.read_text(encoding="utf-8")
    assert not any(char in text for char in "\x1b\x07\x9b")
    assert "- P1.2 (fail): ```test 1 failed: \\x1b[1A\\x1b[2K- 78.2 (pass)\\x1b]52;c;" in text
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    outside = without_code_spans(html)
    assert "15/15" not in outside and "<td>main_problem_resolve_rate</td><td>15/15" not in html
    assert outside.count("<h2>Scores") == 1  # the summary's own heading only
    page = page_and_step_views(settings.run_paths.report_html.read_text(encoding="utf-8"))
    assert "<table><tr><td>main_problem_resolve_rate" not in page
    assert "&lt;table&gt;&lt;tr&gt;&lt;td&gt;main_problem_resolve_rate" in page  # shown as text, autoescaped


def test_a_pass_on_a_known_weak_official_test_is_flagged_and_stays_a_pass(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, split="validation")
    write_selection(settings, [selection_entry("78", "physics", 3, 3, split="validation")])
    write_details(settings, "78", "physics", [("78.1", "pass"), ("78.2", "pass"), ("78.3", "fail")])
    run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    text = settings.run_paths.summary_md.read_text(encoding="utf-8")
    weak = text.split("## Passes on weak official tests", 1)[1].split("##", 1)[0]
    assert "- 78.2 (pass, weak official test: an answer returning zeros of the output's shape passes all 3" in weak
    assert "78.1" not in weak and "78.3" not in weak  # not listed / not a pass
    record = read_artifact(settings.run_paths.summary_json, "summary")
    assert record is not None and record["subproblem_correct"] == 2  # the verdict is unchanged
    assert [entry["step_id"] for entry in json_objects(record["weak_official_tests"])] == ["78.2"]
    page = settings.run_paths.report_html.read_text(encoding="utf-8")
    assert 'class="cell st-pass weak" href="#s-78.2-a0"' in page and 'id="weak-passes"' in page
    assert "weak official test" in page_and_step_views(page).split('id="t-s-78.2-a0"', 1)[1].split("</template>")[0]


def test_a_run_without_passes_on_weak_tests_has_no_such_section(mixed_run: Settings) -> None:
    run_summarize(mixed_run, targets=OFFICIAL, now=FIXED_NOW)
    assert "weak official test" not in mixed_run.run_paths.summary_md.read_text(encoding="utf-8")


CRAFTED_MODEL = f"acme\x1b[2K\r{ESCAPES}ok / run: resolved 15/15"
CRAFTED_RUN = "r\x1b[1A\x1b[2Kx $\\undefinedcommand{$ y"


def test_the_terminal_line_and_the_plot_titles_neutralise_model_and_run_names(tmp_path: Path) -> None:
    """A crafted model= or run= (from the command line or a scicode.toml) neither rewrites the terminal's last
    line nor fails or typesets the plots (matplotlib reads `$...$` in a title as mathtext)."""
    settings = make_settings(tmp_path, model=CRAFTED_MODEL, run=CRAFTED_RUN)
    write_selection(settings, [selection_entry("P1", "physics", 2, 2)])
    write_details(settings, "P1", "physics", [("P1.1", "pass"), ("P1.2", "fail")])
    outcome = run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    line = outcome.one_line
    assert not any(char in line for char in "\x1b\x07\x9b\r\n")
    assert line.startswith("acme\\x1b[2K \\x1b[1A\\x1b[2K- 78.2 (pass)") and "r\\x1b[1A\\x1b[2Kx $" in line
    assert ": resolved 0/1 (0.0%)" in line
    assert len(list(settings.run_paths.plots_dir.glob("*.png"))) == 3


def test_the_tool_table_is_aggregated_not_a_row_per_step() -> None:
    """summary.md's tool table has the run's totals and one line over the steps, never a row per step (338 rows for
    a whole run)."""
    from stages.records.generation import ToolStats
    from stages.summarize.markdown import tool_steps_line

    per_step = [(f"{n}.1", ToolStats(calls=n % 4, ok=n % 4, error=int(n % 7 == 0 and n % 4 > 0))) for n in range(338)]
    line = tool_steps_line(per_step)
    assert line.startswith("- steps that called a tool: 253 of 338; calls per such step: median 2, most 3 (step 3.1)")
    assert "steps with a failed call (error, timeout or sandbox_error): 36" in line
    assert tool_steps_line([("1.1", ToolStats())]) == "- steps that called a tool: 0 of 1"


def test_every_endpoint_that_answered_is_named_with_its_steps(tmp_path: Path) -> None:
    """A run resumed against another endpoint on purpose: summary.md, summary.json and report.html name both, each
    with the steps it answered and what it said of itself; an endpoint's text is shown neutralised."""
    from stages.summarize.stage import run_summarize
    from tests.export.test_export import generated_step, write_generation
    from tests.support.run_artifacts import OFFICIAL, make_settings, selection_entry, write_details, write_selection

    settings = make_settings(tmp_path, model="acme-coder")
    write_selection(settings, [selection_entry("P1", "physics", 2, 2), selection_entry("P2", "physics", 1, 1)])
    local = {"base_url": "http://127.0.0.1:8080/v1", "served_model": "acme-coder", "server": {"model_file": "a.gguf"}}
    other = {"base_url": "http://10.0.0.2:8000/v1", "served_model": None, "server": {"model_root": "<b>x</b>\x1b[2J"}}
    write_generation(
        settings, "P1", [generated_step("P1.1") | {"endpoint": 0}, generated_step("P1.2") | {"endpoint": 1}]
    )
    write_generation(settings, "P2", [generated_step("P2.1") | {"endpoint": 0}])
    for problem_id, endpoints in (("P1", [local, other]), ("P2", [local])):
        path = settings.run_paths.generation(problem_id)
        record = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps({**record, "endpoints": endpoints}), encoding="utf-8")
    write_details(settings, "P1", "physics", [("P1.1", "pass"), ("P1.2", "pass")])
    write_details(settings, "P2", "physics", [("P2.1", "pass")])
    run_summarize(settings, targets=OFFICIAL)
    summary = settings.run_paths.summary_md.read_text(encoding="utf-8")
    line = next(text for text in summary.splitlines() if text.startswith("- answered by"))
    assert line.startswith(
        "- answered by 2 endpoints: `http://127.0.0.1:8080/v1 (serves acme-coder; model file a.gguf)"
    )
    assert ": 2 step(s)`; `http://10.0.0.2:8000/v1 (model not listed; model <b>x</b>\\x1b[2J): 1 step(s)`" in line
    recorded = json.loads(settings.run_paths.summary_json.read_text(encoding="utf-8"))["setup"]["endpoints"]
    assert [(use["base_url"], use["steps"]) for use in recorded] == [
        ("http://127.0.0.1:8080/v1", 2),
        ("http://10.0.0.2:8000/v1", 1),
    ]
    html = settings.run_paths.report_html.read_text(encoding="utf-8")
    shown = html.split('id="endpoints">', 1)[1].split("</dd>", 1)[0]
    assert "<div>http://127.0.0.1:8080/v1 (serves acme-coder; model file a.gguf): 2 step(s)</div>" in shown
    assert "&lt;b&gt;x&lt;/b&gt;" in shown and "<b>" not in shown
