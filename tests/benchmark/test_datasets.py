"""Datasets: the verified description on SciCode-Verified's released files (staged by hand, from
../shared/scicode-verified), manifest-bound loading (md5, number and order of problems, targets), the excluded
problem, the splits, the targets preflight, and the dataset setting through identity, fingerprints and explain."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import h5py
import pytest

from stages.benchmark.datasets import ProblemDataError, dataset_named, dataset_names
from stages.config.settings import ConfigError, Settings, load_settings
from stages.download.bound import BoundDataError
from stages.download.stage import run_download
from stages.generate.identity import PROBLEMS_MD5_KEY, check_identity, identity_of
from stages.pipeline.tasks import explain
from stages.preflight.checks import check_targets
from stages.records.selection import read_selection_file
from stages.select.stage import run_select, select_problems
from stages.targets import resolve_targets
from tests.support.run_artifacts import json_at

SHARED_MD5 = "07c4cd521ea60a166c05737ddfa51ac0"  # the shared copy's problem file (revision 3dfa277b)
VERIFIED_FILES = ("problems_test.jsonl", "manifest.json")


def stage_verified(data_dir: Path, shared_verified: Path) -> Path:
    """`data_dir/scicode-verified/` holding copies of the released problem file and its manifest."""
    folder = data_dir / "scicode-verified"
    folder.mkdir(parents=True)
    for name in VERIFIED_FILES:
        shutil.copyfile(shared_verified / name, folder / name)
    return folder


@pytest.fixture
def verified_dir(staged_data_dir: Path, shared_verified: Path) -> Path:
    return stage_verified(staged_data_dir, shared_verified)


def verified_settings(data_dir: Path, results: Path, **extra: str) -> Settings:
    return load_settings(
        {
            "dataset": "verified",
            "model": "m",
            "data_dir": str(data_dir),
            "results_dir": str(results),
            "dataset_zip_url": "",
            **extra,
        }
    )


def md5_of(path: Path) -> str:
    return hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()


def rewrite_manifest(folder: Path, **fields: object) -> None:
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    manifest.update(fields)
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


# ---------------------------------------------------------------------------
# The descriptions
# ---------------------------------------------------------------------------


def test_each_dataset_is_one_description() -> None:
    assert dataset_names() == ("original", "verified")
    verified = dataset_named("verified")
    assert verified.folder == "scicode-verified" and verified.splits == {"test": "problems_test.jsonl"}
    assert verified.excluded_problems == frozenset({"2"}) and verified.problem_count("all") == 64
    assert verified.published is not None and verified.published.revision == "faa28a1d4e709bf94c659f04ba608e51d3dceb1f"
    assert verified.published.problems_md5 == "5c604d8dbf52642bd94e13b92c8f52eb"
    assert verified.published.url("http://127.0.0.1:1/mirror/", "manifest.json") == (
        "http://127.0.0.1:1/mirror/faa28a1d4e709bf94c659f04ba608e51d3dceb1f/scicode_verified/manifest.json"
    )
    assert dataset_named("original").problem_count("all") == 80
    with pytest.raises(ValueError, match="unknown dataset 'x': expected one of original, verified"):
        dataset_named("x")


# ---------------------------------------------------------------------------
# The verified selection on the shared file
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["test", "all"])
def test_the_verified_selection_counts_64_problems_and_287_scored_steps(
    tmp_path: Path, staged_data_dir: Path, verified_dir: Path, split: str
) -> None:
    settings = verified_settings(staged_data_dir, tmp_path / "results", split=split)
    record = run_download(settings)
    assert (
        json_at(record, "files", "problems_test.jsonl", "checksum") == "manifest-bound"
    )  # another revision than the pin
    run_select(settings)
    selection = read_selection_file(settings.run_paths.selection)
    assert selection is not None
    assert len(selection.entries) == 64
    assert sum(entry.scored_steps for entry in selection.entries) == 287
    assert "2" not in selection.by_id
    assert selection.dataset == "verified" and selection.problems_md5 == SHARED_MD5
    assert settings.run_paths.run_dir.name == f"verified-{split}-tool_use-bg"
    prefilled = {step.step_id for entry in selection.entries for step in entry.layout if step.prefilled}
    assert prefilled == {"13.6", "62.1", "76.3"}


def test_validation_is_refused_under_verified(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({"dataset": "verified", "model": "m", "split": "validation"})
    assert str(refused.value) == (
        "invalid split=validation with dataset=verified: expected all or test (the verified data holds no other split)"
    )
    with pytest.raises(ConfigError, match="invalid dataset=verified with model=gold"):
        load_settings({"dataset": "verified"})


def test_prompts_use_the_official_templates_unchanged(
    tmp_path: Path, staged_data_dir: Path, verified_dir: Path
) -> None:
    settings = verified_settings(staged_data_dir, tmp_path / "results")
    official = staged_data_dir / "scicode" / "multistep_template.txt"
    assert settings.benchmark.template(True) == official.read_text(encoding="utf-8")
    step = settings.benchmark.problem("13").steps[5]
    assert step.prefilled and settings.benchmark.prefilled_code(step) == (
        staged_data_dir / "scicode" / "13.6.txt"
    ).read_text(encoding="utf-8")


def test_problem_2_is_never_selected(tmp_path: Path, staged_data_dir: Path, verified_dir: Path) -> None:
    """A verified file that held problem 2 (bound by its manifest) still selects 64 problems."""
    original = [json.loads(line) for line in (staged_data_dir / "scicode" / "problems_test.jsonl").open()]
    problem_2 = next(record for record in original if record["problem_id"] == "2")
    lines = (verified_dir / "problems_test.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (verified_dir / "problems_test.jsonl").write_text(json.dumps(problem_2) + "\n" + "".join(lines), encoding="utf-8")
    order = json.loads((verified_dir / "manifest.json").read_text())["problem_order"]
    rewrite_manifest(
        verified_dir,
        n_problems=65,
        problem_order=["2", *order],
        problems_test_jsonl_md5=md5_of(verified_dir / "problems_test.jsonl"),
    )
    settings = verified_settings(staged_data_dir, tmp_path / "results")
    chosen = [problem.problem_id for problem in select_problems(settings)]
    assert len(chosen) == 64 and "2" not in chosen
    with pytest.raises(ConfigError, match="problem id 2 is not in split=all"):
        select_problems(verified_settings(staged_data_dir, tmp_path / "results", sample_ids="2"))


# ---------------------------------------------------------------------------
# Manifest-bound loading
# ---------------------------------------------------------------------------


def test_a_corrupted_verified_file_is_refused_with_both_md5s_named(
    tmp_path: Path, staged_data_dir: Path, verified_dir: Path
) -> None:
    problems = verified_dir / "problems_test.jsonl"
    problems.write_bytes(problems.read_bytes().replace(b"numpy", b"nompy", 1))
    corrupted = md5_of(problems)
    settings = verified_settings(staged_data_dir, tmp_path / "results")
    for action in (run_download, select_problems):
        with pytest.raises(ProblemDataError) as refused:
            action(settings)
        message = str(refused.value)
        assert "\n" not in message
        assert str(problems) in message and corrupted in message and SHARED_MD5 in message
    assert not settings.benchmark.record_path.exists()


def test_an_unparsable_manifest_is_refused_naming_the_file_and_the_line(
    tmp_path: Path, staged_data_dir: Path, verified_dir: Path
) -> None:
    (verified_dir / "manifest.json").write_text('{\n  "version": "v2",\n  "n_problems": 64,,\n}\n')
    settings = verified_settings(staged_data_dir, tmp_path / "results")
    with pytest.raises(ProblemDataError, match=rf"^{verified_dir / 'manifest.json'}:3: not valid JSON"):
        select_problems(settings)


def test_an_unparsable_problem_line_is_refused_naming_the_file_and_the_line(
    tmp_path: Path, staged_data_dir: Path, verified_dir: Path
) -> None:
    problems = verified_dir / "problems_test.jsonl"
    lines = problems.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = lines[2][:100] + "\n"
    problems.write_text("".join(lines), encoding="utf-8")
    rewrite_manifest(verified_dir, problems_test_jsonl_md5=md5_of(problems))
    with pytest.raises(ProblemDataError, match=rf"^{problems}:3: not valid JSON$"):
        select_problems(verified_settings(staged_data_dir, tmp_path / "results"))


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("problem_order", 5, "a list of problem ids"),
        ("n_problems", "64", "a whole number"),
        ("problems_test_jsonl_md5", None, "a text (an md5)"),
        ("h5_md5", ["x"], "a text (an md5)"),
    ],
)
def test_a_manifest_field_of_the_wrong_type_is_one_line(
    tmp_path: Path, staged_data_dir: Path, verified_dir: Path, field: str, value: object, expected: str
) -> None:
    rewrite_manifest(verified_dir, **{field: value})
    with pytest.raises(ProblemDataError) as refused:
        select_problems(verified_settings(staged_data_dir, tmp_path / "results"))
    assert str(refused.value) == f"{verified_dir / 'manifest.json'}: field {field!r} is not {expected}"


def test_a_problem_record_of_the_wrong_shape_is_one_line(
    tmp_path: Path, staged_data_dir: Path, verified_dir: Path
) -> None:
    problems = verified_dir / "problems_test.jsonl"
    lines = problems.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[0] = json.dumps({"problem_id": "5", "sub_steps": ["not a step"]}) + "\n"
    problems.write_text("".join(lines), encoding="utf-8")
    rewrite_manifest(verified_dir, problems_test_jsonl_md5=md5_of(problems))
    with pytest.raises(ProblemDataError, match="^malformed problem record 5: string indices must be integers"):
        select_problems(verified_settings(staged_data_dir, tmp_path / "results"))


def test_problems_out_of_the_manifests_number_or_order_are_refused(
    tmp_path: Path, staged_data_dir: Path, verified_dir: Path
) -> None:
    settings = verified_settings(staged_data_dir, tmp_path / "results")
    rewrite_manifest(verified_dir, n_problems=63)
    with pytest.raises(ProblemDataError, match="64 problems, the manifest's n_problems is 63"):
        select_problems(settings)
    order = json.loads((verified_dir / "manifest.json").read_text())["problem_order"]
    rewrite_manifest(verified_dir, n_problems=64, problem_order=[order[1], order[0], *order[2:]])
    with pytest.raises(ProblemDataError, match="problem 1 is 5, the manifest's problem_order has 8 there"):
        select_problems(settings)


# ---------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------


def test_without_targets_the_preflight_names_what_is_missing_and_where_it_is_published(
    tmp_path: Path, staged_data_dir: Path, verified_dir: Path
) -> None:
    settings = verified_settings(staged_data_dir, tmp_path / "results", split="test")
    run_download(settings)
    assert resolve_targets(settings).kind == "missing"
    with pytest.raises(ConfigError) as refused:
        check_targets(settings, select_problems(settings))
    message = str(refused.value)
    assert message.startswith("287 of 287 scored steps have no targets (no test_data_cleaned.h5 in ")
    assert "flyingwagner/scicode-verified" in message and "shhu2001/SciCode-Verified" in message
    assert "stage the official test_data_cleaned.h5 (about 1.1 GB, from release `data` of" in message
    assert f"in {verified_dir} or set h5py_file=<path to it>" in message and "split=validation" not in message


def write_targets(path: Path, step_ids: list[str]) -> None:
    with h5py.File(path, "w") as handle:
        for step_id in step_ids:
            handle.create_group(step_id).create_dataset("test1", data=[1.0])


def test_targets_beside_the_problems_are_checked_against_the_manifests_h5_md5(
    tmp_path: Path, staged_data_dir: Path, verified_dir: Path
) -> None:
    targets = verified_dir / "test_data_cleaned.h5"
    write_targets(targets, ["21.1"])
    settings = verified_settings(staged_data_dir, tmp_path / "results", sample_ids="21")
    with pytest.raises(ProblemDataError) as refused:
        run_download(settings)
    assert str(targets) in str(refused.value) and md5_of(targets) in str(refused.value)
    assert "2b41a7df40ddc23ce651ec05b8ecb6f8" in str(refused.value)

    rewrite_manifest(verified_dir, h5_md5=md5_of(targets))
    record = run_download(settings)
    assert record["official_targets"] is True and json_at(record, "targets", "kind") == "official"
    resolved = resolve_targets(settings)
    assert resolved.kind == "official" and resolved.path == targets
    problems = select_problems(settings)
    with pytest.raises(ConfigError, match="no targets \\(not in test_data_cleaned.h5\\)"):
        check_targets(settings, problems)  # 21.1 present, 21.2 and 21.3 not


def test_an_explicit_targets_file_is_checked_too(tmp_path: Path, staged_data_dir: Path, verified_dir: Path) -> None:
    targets = tmp_path / "cleaned.h5"
    write_targets(targets, ["21.1", "21.2", "21.3"])
    settings = verified_settings(staged_data_dir, tmp_path / "results", sample_ids="21", h5py_file=str(targets))
    with pytest.raises(ProblemDataError, match="differs from the md5 2b41a7df40ddc23ce651ec05b8ecb6f8"):
        run_download(settings)
    rewrite_manifest(verified_dir, h5_md5=md5_of(targets))
    assert json_at(run_download(settings), "targets", "kind") == "explicit"
    assert check_targets(settings, select_problems(settings)) == "targets ok: all 3 scored steps have targets"


def test_missing_files_of_a_staged_folder_are_fetched_or_refused(
    tmp_path: Path, staged_data_dir: Path, verified_dir: Path
) -> None:
    (verified_dir / "manifest.json").unlink()
    settings = verified_settings(staged_data_dir, tmp_path / "results", dataset_base_url="http://127.0.0.1:9")
    with pytest.raises(BoundDataError) as refused:
        run_download(settings)
    message = str(refused.value)
    assert message.startswith("dataset=verified: cannot fetch http://127.0.0.1:9/faa28a1d")
    assert "manifest.json" in message and "stage problems_test.jsonl, manifest.json by hand" in message


# ---------------------------------------------------------------------------
# The setting through identity, fingerprints and explain
# ---------------------------------------------------------------------------


def test_the_dataset_setting_round_trips_through_identity_fingerprints_and_explain(
    tmp_path: Path, staged_data_dir: Path, verified_dir: Path
) -> None:
    results = tmp_path / "results"
    original = load_settings({"model": "m", "split": "test", "data_dir": str(staged_data_dir), "run": "r"})
    verified = verified_settings(staged_data_dir, results, split="test", run="r")
    unset = load_settings({"model": "m", "split": "test", "data_dir": str(staged_data_dir), "run": "r"})
    explicit_original = load_settings(
        {"model": "m", "split": "test", "data_dir": str(staged_data_dir), "run": "r", "dataset": "original"}
    )
    for stage in ("select", "generate", "score"):
        # the original leaves every fingerprint as it was before the setting existed; verified changes each
        assert explicit_original.fingerprint(stage) == unset.fingerprint(stage)
        assert verified.fingerprint(stage) != original.fingerprint(stage)
        assert "dataset" in verified.stage_inputs(stage) and "dataset" not in original.stage_inputs(stage)
    assert verified.redacted()["dataset"] == "verified"

    assert "dataset" not in identity_of(original) and PROBLEMS_MD5_KEY not in identity_of(original)
    assert identity_of(verified)["dataset"] == "verified"
    assert identity_of(verified)[PROBLEMS_MD5_KEY] == SHARED_MD5

    run_download(verified)
    run_select(verified)
    assert explain(verified, "select") == "select is up to date"
    assert explain(verified, "download") == "download is up to date"
    back = load_settings(
        {"model": "m", "split": "test", "data_dir": str(staged_data_dir), "run": "r", "results_dir": str(results)}
    )
    explained = explain(back, "select")
    assert explained.startswith('select will run: selection.json: settings changed (dataset "verified" -> (unset))')
    assert 'config.json: settings changed (dataset "verified" -> "original"' in explained


def test_the_problems_md5_joins_an_identity_recorded_before_the_download(
    tmp_path: Path, staged_data_dir: Path, shared_verified: Path
) -> None:
    """A first run records its identity before the files are staged; the md5 is added once known, and a folder whose
    generations were made from another problem file is then another configuration."""
    settings = verified_settings(staged_data_dir, tmp_path / "results", split="test", mode="naive")
    assert check_identity(settings, record=True) is None
    recorded = json.loads(settings.run_paths.identity.read_text(encoding="utf-8"))["settings"]
    assert recorded["dataset"] == "verified" and PROBLEMS_MD5_KEY not in recorded

    settings.run_paths.generations_dir.mkdir(parents=True)
    (settings.run_paths.generations_dir / "5.json").write_text("{}", encoding="utf-8")  # the folder holds answers
    folder = stage_verified(staged_data_dir, shared_verified)
    assert check_identity(settings, record=True) is None
    recorded = json.loads(settings.run_paths.identity.read_text(encoding="utf-8"))["settings"]
    assert recorded[PROBLEMS_MD5_KEY] == SHARED_MD5

    rewrite_manifest(folder, problems_test_jsonl_md5="0" * 32)
    found = check_identity(settings, record=True)
    assert found is not None and found.names() == PROBLEMS_MD5_KEY
    assert found.shown() == f'problems md5 "{SHARED_MD5}" -> "{"0" * 32}"'
