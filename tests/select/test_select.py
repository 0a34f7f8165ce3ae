"""Selection semantics: splits, categories, sample ids, errors, and the run's config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stages.config.settings import ConfigError, load_settings
from stages.select.stage import run_select, select_problems, selected_problem_ids
from stages.storage.artifacts import read_artifact
from tests.support.run_artifacts import json_objects, json_str

DEV_ORDER = ["10", "1", "3", "4", "6", "7", "19", "78", "29", "38", "44", "47", "49", "51", "70"]


def _settings(tmp_path: Path, data_dir: Path, **values: str):
    return load_settings({"data_dir": str(data_dir), "results_dir": str(tmp_path / "results"), **values}, cwd=tmp_path)


def test_validation_split_in_file_order(tmp_path: Path, staged_data_dir: Path) -> None:
    problems = select_problems(_settings(tmp_path, staged_data_dir))
    assert [p.problem_id for p in problems] == DEV_ORDER
    assert sum(len(p.scored_steps) for p in problems) == 50


def test_test_and_all_splits(tmp_path: Path, staged_data_dir: Path) -> None:
    test = select_problems(_settings(tmp_path, staged_data_dir, model="m", split="test"))
    assert len(test) == 65 and test[0].problem_id == "77"
    assert sum(len(p.steps) for p in test) == 291
    assert sum(len(p.scored_steps) for p in test) == 288
    every = select_problems(_settings(tmp_path, staged_data_dir, model="m"))
    assert [p.problem_id for p in every][:15] == DEV_ORDER and len(every) == 80
    assert sum(len(p.scored_steps) for p in every) == 338


def test_sample_ids_keep_official_order(tmp_path: Path, staged_data_dir: Path) -> None:
    chosen = select_problems(_settings(tmp_path, staged_data_dir, model="m", sample_ids="2,10,77"))
    assert [p.problem_id for p in chosen] == ["10", "77", "2"]
    as_json = select_problems(_settings(tmp_path, staged_data_dir, model="m", sample_ids='["13"]'))
    assert [p.problem_id for p in as_json] == ["13"]


def test_categories_select_by_field_or_subfield(tmp_path: Path, staged_data_dir: Path) -> None:
    mathematics = select_problems(_settings(tmp_path, staged_data_dir, category="Mathematics"))
    assert [p.problem_id for p in mathematics] == ["1", "3", "4", "78", "29"]
    assert {p.field for p in mathematics} == {"Mathematics"}
    assert select_problems(_settings(tmp_path, staged_data_dir, category="mathematics")) == mathematics
    pair = select_problems(
        _settings(tmp_path, staged_data_dir, model="m", split="all", category="Numerical Linear Algebra,Optics")
    )
    assert {p.subfield for p in pair} == {"Numerical Linear Algebra", "Optics"}
    assert len(pair) == 18  # 8 + 10 on the SciCode website
    mixed = select_problems(
        _settings(tmp_path, staged_data_dir, model="m", split="all", category='["Biology", "optics"]')
    )
    assert {p.field for p in mixed} == {"Biology", "Physics"} and len(mixed) == 8 + 10
    label = select_problems(_settings(tmp_path, staged_data_dir, model="m", split="all", category="Physics / Optics"))
    assert [p.problem_id for p in label] == [p.problem_id for p in pair if p.subfield == "Optics"]
    assert len(select_problems(_settings(tmp_path, staged_data_dir, category="all"))) == 15
    assert len(select_problems(_settings(tmp_path, staged_data_dir, category="ALL"))) == 15


def test_shipped_table_is_the_shared_one(shared_scicode: Path) -> None:
    from stages.benchmark.categories import CATEGORIES_FILE

    reference = shared_scicode / "categories.json"
    if not reference.is_file():  # not in the wheel: the copy from the SciCode website is only in ../shared
        pytest.skip(f"the shipped categories.json is compared with the website's copy, not at {reference}")
    shipped = json.loads(CATEGORIES_FILE.read_text(encoding="utf-8"))
    shared = json.loads(reference.read_text(encoding="utf-8"))
    assert shipped["problems"] == shared["problems"] and shipped["fields"] == shared["fields"]
    assert "scicode-bench.github.io" in shipped["source"]


def test_every_problem_has_a_field_and_subfield(tmp_path: Path, staged_data_dir: Path) -> None:
    every = select_problems(_settings(tmp_path, staged_data_dir, model="m", split="all"))
    assert len({p.field for p in every}) == 5 and len({p.subfield for p in every}) == 16
    assert "unclassified" not in {p.field for p in every}
    assert next(p for p in every if p.problem_id == "2").category == "Physics / Optics"


def test_unknown_category_is_one_line_listing_fields_and_subfields(tmp_path: Path, staged_data_dir: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        select_problems(_settings(tmp_path, staged_data_dir, category="Optics,physicss"))
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("invalid category=physicss: expected all, or one or more (any case) of the fields ")
    for name in ("Mathematics", "Material Science", "Numerical Linear Algebra", "Quantum Information/Computing"):
        assert name in message


def test_category_without_problems_in_the_split_is_an_empty_selection(tmp_path: Path, staged_data_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"empty selection: no problem of split=validation matches category=Ecology"):
        select_problems(_settings(tmp_path, staged_data_dir, category="Ecology"))


def test_category_stated_in_a_problem_record_wins() -> None:
    from stages.benchmark.problems import problem_from_record

    record = {"problem_id": "2", "sub_steps": [{"step_number": "2.1"}]}
    assert problem_from_record(record, "test").category == "Physics / Optics"
    assert problem_from_record({**record, "category": "Ecology"}, "test").category == "Biology / Ecology"
    assert problem_from_record({**record, "category": "Chemistry"}, "test").field == "Chemistry"
    own = problem_from_record({**record, "field": "Physics", "subfield": "Plasma Physics"}, "test")
    assert (own.field, own.subfield) == ("Physics", "Plasma Physics")
    assert problem_from_record({"problem_id": "999", "sub_steps": []}, "test").category == "unclassified"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"sample_ids": "999"}, "invalid sample_ids: problem id 999 is not in split=validation"),
        ({"sample_ids": "77"}, "invalid sample_ids: problem id 77 is not in split=validation"),
    ],
)
def test_selection_errors(tmp_path: Path, staged_data_dir: Path, values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        select_problems(_settings(tmp_path, staged_data_dir, **values))
    assert message in str(raised.value)


def test_run_select_writes_selection_and_redacted_config(
    tmp_path: Path, staged_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    settings = _settings(tmp_path, staged_data_dir, sample_ids="1,3")
    record = run_select(settings)
    problems = json_objects(record["problems"])
    assert [p["problem_id"] for p in problems] == ["1", "3"]
    assert all(p["field"] == "Mathematics" and p["subfield"] == "Numerical Linear Algebra" for p in problems)
    assert all(
        p["category"] == "Mathematics / Numerical Linear Algebra" and len(json_str(p["fingerprint"])) == 64
        for p in problems
    )
    assert read_artifact(settings.run_paths.selection, "selection") == record
    config_text = settings.run_paths.config.read_text(encoding="utf-8")
    assert "sk-must-not-leak" not in config_text
    config = json.loads(config_text)
    assert config["settings"]["sample_ids"] == ["1", "3"] and config["settings"]["api_key_present"] is True
    assert selected_problem_ids(settings) == ["1", "3"]
    changed = _settings(tmp_path, staged_data_dir, sample_ids="1")
    assert selected_problem_ids(changed) is None  # stale selection is not used


def test_missing_problem_files_are_reported(tmp_path: Path) -> None:
    settings = _settings(tmp_path, tmp_path / "nowhere")
    with pytest.raises(Exception, match=r"missing .*problems_dev.jsonl: run `doit download` first"):
        select_problems(settings)


def test_select_and_compare_share_one_view(tmp_path: Path, staged_data_dir: Path) -> None:
    """The view's predicate is what select writes and what compare narrows to; its tag names the subset's files."""
    from stages.compare.stage import narrowing_of
    from stages.config.view import View

    settings = _settings(tmp_path, staged_data_dir, split="validation", sample_ids="19,1", attempts="3")
    view = settings.view
    assert view.tag == settings.summary_tag == "ids-19_1-k3"
    assert narrowing_of(settings) == View(("19", "1")) and narrowing_of(settings).tag == "ids-19_1"
    chosen = select_problems(settings)
    assert [problem.problem_id for problem in chosen] == ["1", "19"]
    assert all(view.selects(problem.problem_id, problem.taxonomy) for problem in chosen)
    assert not view.selects("2", chosen[0].taxonomy)
    assert View(categories=("Mathematics",)).narrowing == "category=Mathematics"
    assert View(tuple(str(n) for n in range(100, 130))).tag.startswith("ids-30-")
