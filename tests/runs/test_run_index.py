"""`doit runs`: the index of every run under results_dir (rows, states, marked settings, Pareto fronts)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stages.runs.index import index_rows, pareto_front
from stages.runs.page import nice_ticks, plot_groups, write_run_index
from stages.storage.artifacts import write_artifact
from stages.storage.paths import ResultsPaths
from stages.summarize.stage import run_summarize
from tests.support.run_artifacts import (
    FIXED_NOW,
    OFFICIAL,
    make_settings,
    make_summarized_run,
    make_whole_split_run,
    read_record,
    results,  # noqa: F401 - the runs fixture
    selection_entry,
    write_details,
    write_selection,
)


def test_pareto_front_by_hand() -> None:
    # (cost, rate): A (1, 0.5), B (0.1, 0.17), C (1, 0.17), D (2, 0.5), E (0.5, 0.6)
    # B is cheapest; E costs more and resolves more; A, C and D cost more than E for no more: front B, E
    assert pareto_front([(1, 0.5), (0.1, 0.17), (1, 0.17), (2, 0.5), (0.5, 0.6)]) == {1, 4}
    assert pareto_front([(1, 0.5), (1, 0.5)]) == {0}  # of identical runs, the first
    assert pareto_front([]) == set()


def test_nice_ticks_cover_the_largest_value() -> None:
    assert nice_ticks(6.0) == [0.0, 2.0, 4.0, 6.0]
    assert nice_ticks(1_250_000)[-1] >= 1_250_000
    assert nice_ticks(0.0) == [0.0, 1.0]


def test_rows_hold_settings_rates_intervals_and_cost(results: ResultsPaths) -> None:
    rows = {row.model: row for row in index_rows(results)}
    assert set(rows) == {"strong", "cheap", "wasteful", "tokens-only", "pending"}
    strong = rows["strong"]
    assert (strong.split, strong.with_background, strong.mode, strong.carry, strong.attempts) == (
        "test",
        False,
        "tool_use",
        "full",
        1,
    )
    assert (strong.resolved, strong.problems, strong.steps_passed, strong.steps_scored) == (3, 6, 3, 6)
    # Wilson, 3 of 6: centre = (3 + 1.920729) / 9.841459 = 0.5, half = 1.959964 / 9.841459 * sqrt(1.5 + 0.960365)
    # = 0.199154 * 1.568555 = 0.312383 -> [0.187617, 0.812383]
    assert strong.resolve_interval == (pytest.approx(0.187617, abs=2e-6), pytest.approx(0.812383, abs=2e-6))
    assert strong.cost == pytest.approx(6.0) and strong.tokens == 6 * 250_000
    assert rows["cheap"].cost == pytest.approx(0.6)
    assert rows["tokens-only"].cost is None and rows["tokens-only"].tokens == 5 * 250_000
    assert strong.state == "summarized" and strong.report is not None and strong.report.name == "report.html"
    assert rows["pending"].state == "not summarized" and rows["pending"].resolve_rate is None
    # 6 of the test split's 65 problems and 5 of all 80: subsets, never marked as the published settings
    assert strong.marks == () and rows["tokens-only"].marks == ()


def test_only_a_run_that_is_the_published_setting_is_marked(tmp_path: Path) -> None:
    """Marked: the run its summary says is the published setting (protocol=scicode-paper over the whole split, one
    attempt, the default carry, official targets). Not marked: the same split and background without the protocol's
    temperature (the old rule, split and background only, marked it), with another carry, with several attempts,
    or a subset."""
    paper = {"protocol": "scicode-paper"}
    whole = make_whole_split_run(tmp_path, "whole", **paper)
    make_whole_split_run(tmp_path, "no-temperature")
    make_whole_split_run(tmp_path, "carrydef", carry="definition", **paper)
    make_whole_split_run(tmp_path, "attempts", attempts="2", **paper)
    subset = make_settings(tmp_path, None, model="subset", sample_ids="P1,P2", **paper)
    write_selection(subset, [selection_entry(pid, "physics", 1, 1) for pid in ("P1", "P2")])
    for pid in ("P1", "P2"):
        write_details(subset, pid, "physics", [(f"{pid}.1", "pass")])
    run_summarize(subset, targets=OFFICIAL, now=FIXED_NOW)
    rows = {row.model: row for row in index_rows(ResultsPaths(tmp_path / "results"))}
    assert [mark.key for mark in rows["whole"].marks] == ["scicode-paper"]
    assert rows["subset"].summary_tag and rows["subset"].marks == ()
    assert rows["carrydef"].marks == () and rows["attempts"].marks == () and rows["no-temperature"].marks == ()
    published = rows["carrydef"].published
    assert published is not None and "carry=definition (protocol: full)" in published.text
    text = write_run_index(whole).read_text(encoding="utf-8")
    marked = {
        line.split(" | ")[0].strip("| `"): line.split(" | ")[13].strip()
        for line in text.splitlines()[8:]
        if "| `" in line
    }
    assert marked == {"whole": "(1)", "no-temperature": "-", "carrydef": "-", "attempts": "-", "subset": "-"}


def test_a_run_changed_since_its_summary_is_stale(results: ResultsPaths) -> None:
    details = next((results.root / "strong").rglob("details/P1.json"))
    later = details.stat().st_mtime + 60
    os.utime(details, (later, later))
    strong = next(row for row in index_rows(results) if row.model == "strong")
    assert strong.state == "stale" and "doit summarize" in strong.note


@pytest.mark.parametrize(
    ("passes", "shown"),
    [
        # 0/n: Wilson of 0 of 5, [0, z^2 / (5 + z^2)] = [0, 43.4%], for the steps too (one step per problem)
        ([False] * 5, "0/5 (0.0%), 95% CI 0.0% to 43.4%"),
        # n/n: [5 / (5 + z^2), 1] = [56.6%, 100%]
        ([True] * 5, "5/5 (100.0%), 95% CI 56.6% to 100.0%"),
        # one problem: [1 / (1 + z^2), 1] = [20.7%, 100%]
        ([True], "1/1 (100.0%), 95% CI 20.7% to 100.0%"),
    ],
)
def test_index_rows_never_show_a_zero_width_interval(tmp_path: Path, passes: list[bool], shown: str) -> None:
    settings = make_summarized_run(tmp_path, "edge", passes)
    (row,) = index_rows(ResultsPaths(tmp_path / "results"))
    assert row.resolve_interval is not None and row.step_interval is not None
    assert row.step_interval[1] > row.step_interval[0] and row.step_interval == row.resolve_interval
    text = write_run_index(settings).read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith("| `edge` "))
    assert line.count(shown) == 2  # the resolve rate's cell and the steps' cell
    assert "subproblem (and pass@k) the clustered Wilson interval" in text
    assert "subproblem (and pass@k) the clustered Wilson interval" in results_page(tmp_path)


def results_page(tmp_path: Path) -> str:
    return ResultsPaths(tmp_path / "results").runs_page.read_text(encoding="utf-8")


def test_a_summary_of_earlier_interval_methods_is_stale_and_its_step_interval_not_shown(tmp_path: Path) -> None:
    """A summary written before the clustered Wilson interval (its step interval `p +- 1.96 SE`, 100% to 100%
    at 5 of 5) still reads; the index says to summarize again instead of showing that interval."""
    settings = make_summarized_run(tmp_path, "older", [True] * 5)
    path = settings.run_paths.summary_json
    record = read_record(path, "summary")
    earlier = read_record(
        Path(__file__).resolve().parents[1] / "golden" / "before_intervals" / "summary.json", "summary"
    )
    record["uncertainty"] = earlier["uncertainty"]
    record["intervals"]["subproblem"] = earlier["intervals"]["subproblem"] | {"steps": 5, "problems": 5}
    write_artifact(path, "summary", {key: value for key, value in record.items() if key != "schema_version"})
    (row,) = index_rows(ResultsPaths(tmp_path / "results"))
    assert row.state == "stale" and "earlier interval methods" in row.note and "doit summarize" in row.note
    assert row.step_interval is None and row.resolve_interval is not None  # the Wilson interval is unchanged
    line = next(
        line for line in write_run_index(settings).read_text(encoding="utf-8").splitlines() if "| `older` " in line
    )
    assert "5/5 (100.0%), 95% CI 56.6% to 100.0%" in line and "100.0% to 100.0%" not in line


def test_plots_one_per_setting_with_the_front(results: ResultsPaths) -> None:
    groups = {group.title: group for group in plot_groups(index_rows(results))}
    assert set(groups) == {"split test, no background", "split all, with background"}
    test = groups["split test, no background"]
    assert test.x_kind == "cost"
    # strong ($6, 50%), cheap ($0.60, 16.7%), wasteful ($6, 16.7%): the front is cheap then strong
    assert [point.label.split(" / ")[0] for point in test.front_points] == ["cheap", "strong"]
    # the protocols of the plot's split and background, though its runs are subsets
    assert [mark.key for mark in test.marks] == ["scicode-paper", "inspect-evals"]
    assert groups["split all, with background"].x_kind == "tokens"


def test_markdown_index_lists_every_run(results: ResultsPaths, tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    path = write_run_index(settings)
    text = path.read_text(encoding="utf-8")
    for model in ("strong", "cheap", "wasteful", "tokens-only", "pending"):
        assert f"| `{model}` " in text  # names as code spans
    strong_line = next(line for line in text.splitlines() if line.startswith("| `strong` "))
    assert "3/6 (50.0%), 95% CI 18.8% to 81.2%" in strong_line and "$6.00" in strong_line
    assert "[report](strong/test-tool_use-nobg/report.html#headline)" in strong_line
    assert "(1) the SciCode paper's main setting and the official leaderboard (test split, no background)." in text
    assert "- split test, no background: `cheap` / `test-tool_use-nobg` (16.7% resolved, $0.6000)," in text
    assert results.runs_page.is_file()


def test_a_run_that_made_nothing_is_not_listed(results: ResultsPaths, tmp_path: Path) -> None:
    """A folder whose run stopped before any answer (the `stopped` model: a selection, no generation, no details,
    no summary) is no run: no row advising `doit summarize` for it, in the rows, runs.md or runs.html."""
    assert (results.root / "stopped").is_dir()
    assert "stopped" not in {row.model for row in index_rows(results)}
    assert "pending" in {row.model for row in index_rows(results)}
    write_run_index(make_settings(tmp_path))
    assert "stopped" not in (results.root / "runs.md").read_text(encoding="utf-8")
    assert "stopped" not in results.runs_page.read_text(encoding="utf-8")
