"""A run's caveats, computed once (`stages.summarize.caveats`), travel with its headline: summary.json, the final
terminal line, summary.md's first lines, report.html's header and the run index's row."""

from __future__ import annotations

import json
from pathlib import Path

from stages.compare.stage import compare_runs
from stages.export.stage import export_run
from stages.records.summary import read_summary_file
from stages.runs.page import write_run_index
from stages.storage.artifacts import read_artifact, write_artifact
from stages.summarize.stage import run_summarize
from tests.support.run_artifacts import (
    DERIVED,
    FIXED_NOW,
    OFFICIAL,
    make_settings,
    make_whole_split_run,
    selection_entry,
    write_details,
    write_selection,
)

USAGE = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15, "calls": 1}
NAIVE_PHRASE = "tool_use behaved as naive"


def tool_use_run_without_tool_calls(tmp_path: Path):
    """Two problems of a tool_use run whose model was called but never called a tool (a server ignoring tools)."""
    settings = make_settings(tmp_path, mode="tool_use")
    write_selection(settings, [selection_entry(pid, "physics", 1, 1) for pid in ("P1", "P2")])
    write_details(settings, "P1", "physics", [("P1.1", "pass")], meta={"usage": USAGE})
    write_details(settings, "P2", "physics", [("P2.1", "fail")], meta={"usage": USAGE})
    return settings


def test_every_caveat_is_shown_wherever_the_headline_is(tmp_path: Path) -> None:
    settings = tool_use_run_without_tool_calls(tmp_path)
    outcome = run_summarize(settings, targets=DERIVED, now=FIXED_NOW)
    summary = read_summary_file(settings.run_paths.summary_json)
    assert summary is not None
    assert [caveat.kind for caveat in summary.caveats] == ["targets_derived", "tool_use_as_naive", "subset"]
    texts = [caveat.text for caveat in summary.caveats]
    assert "2 of the 65 problems of split test (a subset)" in texts
    # the terminal's final line
    assert (
        "[" + "; ".join(texts) + "]; not a published setting" in outcome.one_line and NAIVE_PHRASE in outcome.one_line
    )
    # summary.md's first lines
    first_lines = settings.run_paths.summary_md.read_text(encoding="utf-8").splitlines()[:6]
    assert any(
        line.startswith("**Caveats:**") and NAIVE_PHRASE in line and "(a subset)" in line for line in first_lines
    )
    # report.html's header
    html = settings.run_paths.report_html.read_text(encoding="utf-8")
    header = html.split("<header>", 1)[1].split("</header>", 1)[0]
    assert 'id="caveats"' in header and NAIVE_PHRASE in header and "targets derived from reference code" in header
    # the run index: runs.md and runs.html rows
    runs_md = write_run_index(settings).read_text(encoding="utf-8")
    row = next(line for line in runs_md.splitlines() if line.startswith("| `test-model` "))
    assert NAIVE_PHRASE in row and "(a subset)" in row
    runs_html = settings.run_paths.run_dir.parents[1].joinpath("runs.html").read_text(encoding="utf-8")
    assert NAIVE_PHRASE in runs_html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]


def test_a_subset_is_its_only_caveat(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, mode="naive")
    write_selection(settings, [selection_entry("P1", "physics", 1, 1)])
    write_details(settings, "P1", "physics", [("P1.1", "pass")], meta={"usage": USAGE})
    outcome = run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    summary = read_summary_file(settings.run_paths.summary_json)
    assert summary is not None and [caveat.kind for caveat in summary.caveats] == ["subset"]
    assert "[1 of the 65 problems of split test (a subset)]; not a published setting" in outcome.one_line


def test_a_whole_split_run_has_no_caveat(tmp_path: Path) -> None:
    settings = make_whole_split_run(tmp_path, "whole", mode="naive")
    summary = read_summary_file(settings.run_paths.summary_json)
    assert summary is not None and summary.caveats == ()
    assert "**Caveats:**" not in settings.run_paths.summary_md.read_text(encoding="utf-8")
    assert 'id="caveats"' not in settings.run_paths.report_html.read_text(encoding="utf-8")


def test_a_summary_written_before_caveats_still_reads(tmp_path: Path) -> None:
    settings = tool_use_run_without_tool_calls(tmp_path)
    run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    path = settings.run_paths.summary_json
    record = read_artifact(path, "summary")
    assert record is not None
    earlier = {key: value for key, value in record.items() if key not in ("caveats", "schema_version")}
    write_artifact(path, "summary", earlier)
    summary = read_summary_file(path)
    assert summary is not None and summary.caveats == ()


def test_compare_shows_the_caveats_of_each_run(tmp_path: Path) -> None:
    """A's summary records caveats (derived targets, tool_use as naive, a subset); B is a whole-split naive run
    without any: compare.md names A's under its title and none for B."""
    a = tool_use_run_without_tool_calls(tmp_path)
    run_summarize(a, targets=DERIVED, now=FIXED_NOW)
    b = make_whole_split_run(tmp_path, "whole", mode="naive")
    report = compare_runs(a.run_paths.run_dir, b.run_paths.run_dir)
    head = report.split("\n## ", 1)[0]
    line = next(line for line in head.splitlines() if line.startswith("**Caveats of A:**"))
    assert NAIVE_PHRASE in line and "targets derived from reference code" in line
    assert "**Caveats of B:**" not in head


def test_the_inspect_ai_log_carries_the_caveats(tmp_path: Path) -> None:
    settings = tool_use_run_without_tool_calls(tmp_path)
    run_summarize(settings, targets=DERIVED, now=FIXED_NOW)
    log_file = next(path for path in export_run(settings.run_paths.run_dir) if path.suffix == ".json")
    metadata = json.loads(log_file.read_text(encoding="utf-8"))["eval"]["metadata"]
    summary = read_summary_file(settings.run_paths.summary_json)
    assert summary is not None
    assert metadata["caveats"] == [caveat.text for caveat in summary.caveats]
    assert any(NAIVE_PHRASE in text for text in metadata["caveats"])


def test_failed_problems_are_named_by_why_they_failed(tmp_path: Path) -> None:
    """Problems that were generated and scored but had steps without targets are not called "not generated or not
    scored": the caveat counts each kind of failure by its name."""
    settings = make_settings(tmp_path, mode="naive", split="all", allow_missing_targets="true")
    write_selection(settings, [selection_entry(pid, "physics", 1, 1) for pid in ("P1", "P2", "P3", "P4")])
    write_details(settings, "P1", "physics", [("P1.1", "eval_error")], meta={"usage": USAGE})
    write_details(settings, "P2", "physics", [("P2.1", "eval_error")], meta={"usage": USAGE})
    write_details(settings, "P3", "physics", [("P3.1", "pass")], meta={"usage": USAGE})  # P4: no details
    run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    summary = read_summary_file(settings.run_paths.summary_json)
    assert summary is not None
    [failed] = [caveat.text for caveat in summary.caveats if caveat.kind == "problems_failed"]
    assert failed == (
        "3 problem(s) failed (counted as unresolved): 1 not scored, "
        "2 with steps that could not be evaluated (eval_error)"
    )


def test_a_verified_run_graded_in_fewer_environments_than_its_protocol_says_so(tmp_path: Path) -> None:
    """SciCode-Verified's protocol grades every step in a 2024-era and a 2025-era environment: a run graded in one
    carries that caveat wherever its headline is; a run graded in both does not."""
    import sys

    from tests.support.run_artifacts import make_summarized_run

    verified = {"split": "test", "with_background": "false", "dataset": "verified", "mode": "naive"}
    one = make_summarized_run(tmp_path, "one", [True] + [False] * 63, **verified)
    summary = read_summary_file(one.run_paths.summary_json)
    assert summary is not None and [caveat.kind for caveat in summary.caveats] == ["fewer_environments"]
    phrase = "graded in 1 environment(s); the published protocol of dataset verified grades every step in 2"
    assert phrase in summary.caveats[0].text and "(2024-era, 2025-era)" in summary.caveats[0].text
    assert phrase in run_summarize(one, targets=OFFICIAL, now=FIXED_NOW).one_line
    both = f"2024-era:{sys.executable},2025-era:{sys.executable}"
    two = make_summarized_run(tmp_path, "two", [True] + [False] * 63, **verified, environments=both)
    graded = read_summary_file(two.run_paths.summary_json)
    assert graded is not None and graded.caveats == ()
    original = read_summary_file(make_whole_split_run(tmp_path, "original", mode="naive").run_paths.summary_json)
    assert original is not None and original.caveats == ()  # the original's protocols grade in one
