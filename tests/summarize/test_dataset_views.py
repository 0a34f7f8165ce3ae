"""A verified run's dataset wherever the run is shown: summary.json and summary.md, its caveat, the run index
(runs of different datasets are never one setting nor a published one) and the export."""

from __future__ import annotations

import json
from pathlib import Path

from stages.export.stage import export_run
from stages.records.summary import read_summary_file
from stages.runs.index import index_row
from stages.runs.page import write_run_index
from stages.storage.artifacts import read_artifact, write_artifact
from stages.summarize.stage import run_summarize
from tests.support.run_artifacts import (
    FIXED_NOW,
    OFFICIAL,
    make_settings,
    selection_entry,
    write_details,
    write_selection,
)

MD5 = "07c4cd521ea60a166c05737ddfa51ac0"


def verified_run(tmp_path: Path):
    settings = make_settings(tmp_path, dataset="verified", mode="naive")
    write_selection(settings, [selection_entry(pid, "physics", 1, 1) for pid in ("P1", "P2")])
    record = read_artifact(settings.run_paths.selection, "selection")
    assert record is not None
    write_artifact(settings.run_paths.selection, "selection", {**record, "dataset": "verified", "problems_md5": MD5})
    write_details(settings, "P1", "physics", [("P1.1", "pass")])
    write_details(settings, "P2", "physics", [("P2.1", "fail")])
    write_artifact(
        settings.run_paths.config,
        "config",
        {"fingerprint": "0" * 64, "status": "complete", "settings": settings.redacted()},
    )
    return settings


def test_a_verified_run_names_its_dataset_in_the_summary_index_and_export(tmp_path: Path) -> None:
    settings = verified_run(tmp_path)
    assert settings.run_paths.run_dir.name == "verified-test-naive-bg"
    run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    summary = read_summary_file(settings.run_paths.summary_json)
    assert summary is not None
    assert (summary.identity.dataset, summary.identity.problems_md5) == ("verified", MD5)
    assert [caveat.text for caveat in summary.caveats] == [
        "2 of the 64 problems of split test of dataset verified (a subset)",
        "graded in 1 environment(s); the published protocol of dataset verified grades every step in 2 "
        "(2024-era, 2025-era) and passes it when any passes (`doit environments`, then environments=)",
    ]
    markdown = settings.run_paths.summary_md.read_text(encoding="utf-8")
    assert f"- dataset: verified (problem file md5 {MD5}, as its manifest states)" in markdown
    html = settings.run_paths.report_html.read_text(encoding="utf-8")
    assert '<p class="meta">dataset verified &middot; split test &middot;' in html

    row = index_row(settings.run_paths.run_dir)
    assert (row.dataset, row.split_label, row.setting) == (
        "verified",
        "test (verified)",
        ("test (verified)", "with background"),
    )
    assert row.marks == ()
    runs_md = write_run_index(settings).read_text(encoding="utf-8")
    assert "| test (verified) |" in runs_md

    written = export_run(settings.run_paths.run_dir)
    steps = [json.loads(line) for line in settings.run_paths.export_steps_jsonl.read_text().splitlines()]
    assert {step["dataset"] for step in steps} == {"verified"}
    log = json.loads(next(path for path in written if path.suffix == ".json").read_text(encoding="utf-8"))
    assert log["eval"]["dataset"]["name"] == "SciCode-Verified"
    assert log["eval"]["task_args"]["dataset"] == "verified"


def test_an_original_run_is_shown_as_before(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, mode="naive")
    write_selection(settings, [selection_entry("P1", "physics", 1, 1)])
    write_details(settings, "P1", "physics", [("P1.1", "pass")])
    run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    record = json.loads(settings.run_paths.summary_json.read_text(encoding="utf-8"))
    assert "dataset" not in record and "problems_md5" not in record
    assert "- dataset:" not in settings.run_paths.summary_md.read_text(encoding="utf-8")
    assert '<p class="meta">split test &middot;' in settings.run_paths.report_html.read_text(encoding="utf-8")
    row = index_row(settings.run_paths.run_dir)
    assert (row.dataset, row.split_label) == ("original", "test")
