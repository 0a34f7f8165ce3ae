"""Published protocols (`protocol=NAME`), the one answer to "is this run the published setting?" and the published
figures of the run's model beside its own (`stages.summarize.published_setting`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stages.benchmark.published import protocol_names, protocols, published_for, published_results
from stages.compare.stage import compare_runs
from stages.config.settings import ConfigError, load_settings
from stages.export.stage import export_run
from stages.records.summary import Summary, read_summary_file
from stages.runs.index import index_rows
from stages.runs.page import write_run_index
from stages.storage.paths import ResultsPaths
from stages.summarize.stage import run_summarize
from stages.summarize.targets_info import TargetsInfo
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

PAPER = {"protocol": "scicode-paper"}
GPT_4O = "gpt-4o-2024-05-13"  # an alias of the leaderboard's GPT-4o row (1.5% resolved, 25.0% of steps)


def summary_of(settings) -> Summary:
    summary = read_summary_file(settings.run_paths.summary_json)
    assert summary is not None
    return summary


# ---------------------------------------------------------------------------
# protocol= and request parameters
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", protocol_names())
def test_a_protocol_sets_every_setting_it_fixes(name: str) -> None:
    settings = load_settings({"model": "some-model", "protocol": name})
    protocol = next(entry for entry in protocols() if entry.name == name)
    assert protocol.sources, f"{name} cites no source"
    for setting_name, value in protocol.settings.items():
        if setting_name == "model_params":
            assert {key: settings.model_params[key] for key in protocol.request_params} == value
        else:
            shown = getattr(settings, setting_name)
            assert (list(shown) if isinstance(shown, tuple) else shown) == value, setting_name
    assert settings.run_name.endswith(f"-{name}")


def test_the_published_protocols_are_those_of_the_sources() -> None:
    by_name = {entry.name: entry.settings for entry in protocols()}
    assert dict(by_name["scicode-paper"]) == {
        "dataset": "original",
        "split": "test",
        "mode": "naive",
        "with_background": False,
        "carry": "full",
        "attempts": 1,
        "model_params": {"temperature": 0},
    }
    assert by_name["scicode-paper-background"]["with_background"] is True
    agentcompass = by_name["agentcompass"]
    assert (agentcompass["split"], agentcompass["mode"], agentcompass["with_background"]) == ("all", "tool_use", True)
    assert (agentcompass["tool_use_max_loops"], agentcompass["code_timeout_seconds"]) == (15, 180)
    assert (by_name["artificial-analysis"]["split"], by_name["artificial-analysis"]["with_background"]) == ("all", True)
    assert (by_name["inspect-evals"]["with_background"], by_name["inspect-evals"]["model_params"]) == (
        False,
        {"temperature": 0},
    )
    verified = by_name["scicode-verified"]
    assert (verified["dataset"], verified["split"], verified["mode"], verified["with_background"]) == (
        "verified",
        "test",
        "naive",
        False,
    )
    assert "model_params" not in verified and verified["step_timeout_seconds"] == 1800  # the provider's temperature
    assert by_name["scicode-verified-background"]["with_background"] is True
    assert all("dataset" in settings for settings in by_name.values())  # every protocol names its data


def test_a_setting_given_beside_the_protocol_wins() -> None:
    settings = load_settings(
        {
            "model": "m",
            "protocol": "agentcompass",
            "tool_use_max_loops": "5",
            "model_params": '{"temperature": 0.7, "max_tokens": 2048}',
        }
    )
    assert settings.tool_use_max_loops == 5 and settings.split == "all" and settings.mode == "tool_use"
    assert dict(settings.model_params) == {"temperature": 0.7, "max_tokens": 2048}  # merged, the given one wins
    kept = load_settings({"model": "m", "protocol": "agentcompass", "model_params": '{"max_tokens": 2048}'})
    assert dict(kept.model_params) == {"temperature": 0, "max_tokens": 2048}


@pytest.mark.parametrize(
    ("name", "example"),
    [
        ("temperature", '{"temperature":0}'),
        ("top_p", '{"top_p":1}'),
        ("reasoning_effort", '{"reasoning_effort":"high"}'),
    ],
)
def test_a_request_parameter_on_the_command_line_points_to_model_params(name: str, example: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_settings({"model": "m", name: "0"})
    message = str(error.value)
    assert "\n" not in message and f"unknown variable {name!r}" in message
    assert f"model_params='{example}'" in message and "protocol=" in message


def test_an_unknown_protocol_names_the_known_ones() -> None:
    with pytest.raises(ConfigError) as error:
        load_settings({"model": "m", "protocol": "paper"})
    assert str(error.value).startswith("invalid protocol=paper: expected empty, or one of scicode-paper,")


# ---------------------------------------------------------------------------
# Is this run the published setting? Decided once, shown by every writer.
# ---------------------------------------------------------------------------


def test_the_published_setting_is_decided_once_and_shown_everywhere(tmp_path: Path) -> None:
    settings = make_whole_split_run(tmp_path, "whole", **PAPER)
    summary = summary_of(settings)
    assert summary.published.is_published and summary.published.protocol == "scicode-paper"
    phrase = "the published setting scicode-paper"
    outcome = run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    assert phrase in outcome.one_line  # the terminal's final line
    first_lines = settings.run_paths.summary_md.read_text(encoding="utf-8").splitlines()[:8]
    assert any(line.startswith("**Published setting:**") and phrase in line for line in first_lines)
    header = settings.run_paths.report_html.read_text(encoding="utf-8").split("<header>", 1)[1].split("</header>")[0]
    assert 'id="published-setting"' in header and phrase in header
    rows = index_rows(ResultsPaths(tmp_path / "results"))
    assert [mark.key for row in rows for mark in row.marks] == ["scicode-paper"]
    runs_md = write_run_index(settings).read_text(encoding="utf-8")
    assert "(1) the SciCode paper's main setting" in runs_md
    other = make_whole_split_run(tmp_path, "other")  # no protocol, no temperature: no published setting
    compared = compare_runs(settings.run_paths.run_dir, other.run_paths.run_dir)
    head = compared.split("\n## ", 1)[0]
    assert f"**Published setting of A:** {phrase}" in head
    assert "**Published setting of B:** not a published setting: no protocol= given" in head
    log_file = next(path for path in export_run(settings.run_paths.run_dir) if path.suffix == ".json")
    metadata = json.loads(log_file.read_text(encoding="utf-8"))["eval"]["metadata"]
    assert metadata["published_setting"] == {
        "protocol": "scicode-paper",
        "title": summary.published.title,
        "is_published": True,
        "reasons": [],
    }


def test_a_setting_given_beside_the_protocol_makes_the_run_not_published(tmp_path: Path) -> None:
    settings = make_whole_split_run(tmp_path, "hot", **PAPER, model_params='{"temperature": 0.7}', carry="definition")
    published = summary_of(settings).published
    assert not published.is_published and published.protocol == "scicode-paper"
    assert published.reasons == (
        "settings differ from the protocol's: carry=definition (protocol: full), temperature=0.7 (protocol: 0)",
    )
    assert "not the published setting scicode-paper: settings differ" in settings.run_paths.summary_md.read_text(
        encoding="utf-8"
    )


def subset_run(tmp_path: Path, model: str = "subset", **overrides: str):
    settings = make_settings(tmp_path, None, model=model, sample_ids="P1,P2", **PAPER, **overrides)
    write_selection(settings, [selection_entry(pid, "physics", 1, 1) for pid in ("P1", "P2")])
    for pid in ("P1", "P2"):
        write_details(settings, pid, "physics", [(f"{pid}.1", "pass")])
    run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    return settings


def unscored_run(tmp_path: Path):
    """The whole test split, but one problem's step has no targets (eval_error, allow_missing_targets)."""
    settings = make_settings(tmp_path, None, model="unscored", with_background="false", **PAPER)
    ids = [f"P{n}" for n in range(1, 66)]
    write_selection(settings, [selection_entry(pid, "physics", 1, 1) for pid in ids])
    for pid in ids:
        status = "eval_error" if pid == "P7" else "fail"
        write_details(settings, pid, "physics", [(f"{pid}.1", status)], reasons={"P7.1": "target group missing"})
    run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
    return settings


def derived_run(tmp_path: Path):
    settings = make_whole_split_run(tmp_path, "derived", **PAPER)
    run_summarize(settings, targets=DERIVED, now=FIXED_NOW)
    return settings


def attempts_run(tmp_path: Path):
    return make_whole_split_run(tmp_path, "attempts", attempts="2", **PAPER)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (subset_run, "2 of the 65 problems of split test (a subset)"),
        (unscored_run, "1 of 65 scored steps without a verdict against the targets (1 eval_error)"),
        (derived_run, "targets derived, not the official test_data.h5"),
        (attempts_run, "2 attempts per problem (a published figure counts one: pass@1)"),
    ],
)
def test_a_subset_unscored_derived_or_repeated_run_is_not_published(tmp_path: Path, make, reason: str) -> None:
    settings = make(tmp_path)
    published = summary_of(settings).published
    assert not published.is_published and reason in published.reasons
    rows = index_rows(ResultsPaths(tmp_path / "results"))
    assert all(row.marks == () for row in rows)
    assert reason in run_summarize(settings, targets=DERIVED if make is derived_run else OFFICIAL).one_line


def test_explicit_targets_are_official_only_when_they_are_the_official_file(tmp_path: Path) -> None:
    settings = make_whole_split_run(tmp_path, "explicit", **PAPER)
    pinned = "48b0272a88b17dbd29777c217e1b4fb2b019b92e11cc2add847409db9541b890"
    run_summarize(settings, targets=TargetsInfo("explicit", "h5py_file", pinned), now=FIXED_NOW)
    assert summary_of(settings).published.is_published
    run_summarize(settings, targets=TargetsInfo("explicit", "h5py_file", "0" * 64), now=FIXED_NOW)
    assert "targets explicit, not the official test_data.h5" in summary_of(settings).published.reasons


def test_a_verified_run_is_judged_against_the_verified_protocol_never_the_papers(tmp_path: Path) -> None:
    """The paper's protocols are of the original data: a SciCode-Verified run with every other setting of the paper's
    is not its published setting, and matches SciCode-Verified's own protocol."""
    from tests.support.run_artifacts import make_summarized_run

    verified = {"split": "test", "with_background": "false", "dataset": "verified", "mode": "naive"}
    own = summary_of(make_summarized_run(tmp_path, "own", [True] + [False] * 63, **verified)).published
    assert own.is_published and own.protocol == "scicode-verified"
    paper = make_summarized_run(tmp_path, "paper", [True] + [False] * 63, **verified, **PAPER)
    judged = summary_of(paper).published
    assert not judged.is_published and judged.protocol == "scicode-paper"
    assert "dataset=verified (protocol: original)" in judged.reasons[0]


def test_a_run_without_protocol_is_judged_against_the_protocol_it_matches(tmp_path: Path) -> None:
    settings = make_whole_split_run(tmp_path, "matching", mode="naive", model_params='{"temperature": 0}')
    published = summary_of(settings).published
    assert published.is_published and published.protocol == "scicode-paper"  # the first protocol it matches
    unmatched = summary_of(make_whole_split_run(tmp_path, "unmatched", mode="naive")).published
    assert not unmatched.is_published and unmatched.protocol == ""


# ---------------------------------------------------------------------------
# Published figures beside the run's
# ---------------------------------------------------------------------------


def test_every_published_row_is_a_whole_count_over_its_denominators() -> None:
    rows = published_results()
    assert len(rows) == 15 and {row.protocol for row in rows} == {"scicode-paper"}
    for row in rows:
        assert (row.problems, row.steps) == (65, 288)
        assert any(round(100 * k / row.problems, 1) == row.main_problem_resolve_rate for k in range(66)), row
        assert any(round(100 * k / row.steps, 1) == row.subproblem for k in range(289)), row
        assert row.aliases and "leaderboard" in row.source
    assert [row.model for row in published_for(GPT_4O)] == ["GPT-4o"]
    assert published_for("gpt-4o") == () and published_for("GPT-4O-2024-05-13") == ()  # exact ids only


def test_the_published_figure_is_shown_beside_a_run_of_its_setting(tmp_path: Path) -> None:
    settings = make_whole_split_run(tmp_path, GPT_4O, **PAPER)  # 1 of 65 resolved, 1 of 65 steps
    (figure,) = summary_of(settings).references
    assert figure.model == "GPT-4o" and figure.comparable
    # 1.5% lies in the Wilson interval of 1/65 (0.3% to 8.2%); 25.0% of steps lies above the step interval
    assert (figure.resolve_inside, figure.steps_inside) == (True, False)
    expected = "GPT-4o (scicode-paper): resolved 1.5%, inside the run's 95% interval; steps 25.0%, outside"
    assert figure.text.startswith(expected)
    markdown = settings.run_paths.summary_md.read_text(encoding="utf-8")
    head = markdown.split("\n## ", 1)[0]
    assert "**Published figures of this model**" in head and expected in head and "leaderboard" in head
    html = settings.run_paths.report_html.read_text(encoding="utf-8")
    assert 'id="published-figures"' in html.split("</header>")[0] and "resolved 1.5%, inside" in html
    write_run_index(settings)
    runs_html = (tmp_path / "results" / "scicode" / "runs.html").read_text(encoding="utf-8")
    assert "published: GPT-4o (scicode-paper): resolved 1.5%" in runs_html.split("<tbody>", 1)[1]
    runs_md = (tmp_path / "results" / "scicode" / "runs.md").read_text(encoding="utf-8")
    assert expected in runs_md


def test_a_published_figure_beside_a_run_of_another_setting_says_why_it_is_not_comparable(tmp_path: Path) -> None:
    settings = subset_run(tmp_path, model=GPT_4O, split="validation")
    (figure,) = summary_of(settings).references
    assert not figure.comparable and figure.resolve_inside is None
    assert figure.reasons == (
        "settings differ from the protocol's: split=validation (protocol: test)",
        "2 of the 15 problems of split validation (a subset)",
    )
    assert "not comparable: settings differ" in settings.run_paths.summary_md.read_text(encoding="utf-8")


def test_a_model_without_a_published_row_shows_none(tmp_path: Path) -> None:
    settings = make_whole_split_run(tmp_path, "gpt-4o", **PAPER)  # undated: the provider moved it to a later model
    assert summary_of(settings).references == ()
    assert "**Published figures" not in settings.run_paths.summary_md.read_text(encoding="utf-8")


def test_a_changed_published_table_makes_the_summary_out_of_date(tmp_path: Path, monkeypatch) -> None:
    """Summaries judge against the tables and show their figures: their fingerprint covers both files."""
    from stages.benchmark import published
    from stages.summarize.stage import summary_is_current

    settings = make_whole_split_run(tmp_path, "some-model", **PAPER)
    assert summary_is_current(settings)
    table = json.loads(published.PUBLISHED_FILE.read_text(encoding="utf-8"))
    row = dict(table["results"][0], model="Some model", aliases=["some-model"])
    edited = tmp_path / "published.json"
    edited.write_text(json.dumps({**table, "results": [*table["results"], row]}), encoding="utf-8")
    monkeypatch.setattr(published, "PUBLISHED_FILE", edited)
    published.published_results.cache_clear()
    try:
        assert not summary_is_current(settings)
        run_summarize(settings, targets=OFFICIAL, now=FIXED_NOW)
        assert [figure.model for figure in summary_of(settings).references] == ["Some model"]
    finally:
        published.published_results.cache_clear()


def test_a_protocol_entry_may_fix_any_declared_setting_and_only_those(tmp_path: Path, monkeypatch) -> None:
    """Entries are data: one fixing scoring and selection settings works as the built-in ones do; one naming a
    setting that does not exist stops the run with one line."""
    from stages.benchmark import published

    table = json.loads(published.PROTOCOLS_FILE.read_text(encoding="utf-8"))
    extra = {
        "name": "strict-scoring",
        "title": "a protocol of another harness",
        "sources": ["a test"],
        "settings": {"split": "validation", "step_timeout_seconds": 300, "sample_ids": ["1", "3"]},
    }
    broken = dict(extra, name="broken", settings={"no_such_setting": 1})
    edited = tmp_path / "protocols.json"
    edited.write_text(json.dumps({**table, "protocols": [*table["protocols"], extra, broken]}), encoding="utf-8")
    monkeypatch.setattr(published, "PROTOCOLS_FILE", edited)
    published.protocols.cache_clear()
    try:
        settings = load_settings({"model": "m", "protocol": "strict-scoring"})
        assert (settings.split, settings.step_timeout_seconds, settings.sample_ids) == ("validation", 300.0, ("1", "3"))
        with pytest.raises(ConfigError) as error:
            load_settings({"model": "m", "protocol": "broken"})
        assert str(error.value) == "invalid protocol=broken: it fixes no_such_setting, which is not a setting"
    finally:
        published.protocols.cache_clear()


def test_a_protocol_that_the_gold_model_cannot_run_says_where_its_split_came_from() -> None:
    with pytest.raises(ConfigError) as error:
        load_settings({"protocol": "scicode-paper"})
    assert str(error.value).startswith("invalid split=test (set by protocol=scicode-paper) with model=gold")
