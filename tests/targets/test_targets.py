"""Targets: the compared-expression finder, the official HDF5 layout, isolated derivation, resolution."""

from __future__ import annotations

import ast
import json
import shutil
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.sparse

from stages.benchmark.problems import load_split
from stages.config.settings import load_settings
from stages.download.stage import run_download
from stages.execution.isolation import Limits
from stages.storage.artifacts import read_artifact
from stages.storage.json_values import freeze_object
from stages.targets import (
    CAPTURE_NAME,
    GZIP_MIN_BYTES,
    DerivationError,
    DerivationJob,
    H5Dataset,
    H5Group,
    ResolvedTargets,
    capture_program,
    compared_expression,
    derive_targets,
    derived_record_path,
    derived_targets_current,
    derived_targets_fingerprint,
    evaluate_step,
    expected_durations,
    find_target_comparison,
    layout_of_test,
    longest_first,
    resolve_targets,
    run_step_isolated,
    step_jobs,
    survey_comparisons,
    value_layout,
    write_targets_file,
)
from tests.support.pipeline_support import EmbeddedDefaultRun
from tests.support.run_artifacts import json_at, json_number, json_str, read_record, steps_of
from tests.support.targets_diff import target_file_differences

DEV_TARGETS = "test_data_dev.h5"
# Small validation problems covering tuples (3.1, 10.3), ragged lists (70.6), complex values, strings for
# tests that never read target (78.1, 78.2), gzip-compressed arrays (78.3) and the `target[i]` pattern (10.3).
SMALL_PROBLEMS = {"3": None, "70": None, "78": None, "10": 3}  # problem id -> number of leading steps kept


def unparse(source: str) -> str | None:
    expression = compared_expression(source)
    return None if expression is None else ast.unparse(expression)


# ---------------------------------------------------------------------------
# Finder
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("assert np.allclose(f(x), target)", "f(x)"),
        ("assert np.allclose(target, f(x))", "f(x)"),
        ("assert np.allclose(f(x), target, atol=1e-3, rtol=0)", "f(x)"),
        ("assert cmp_tuple_or_list(f(x, y=2), target)", "f(x, y=2)"),
        ("assert f(x) == target", "f(x)"),
        ("assert target == f(x)", "f(x)"),
        ("assert (f(x) == target).all()", "f(x)"),
        ("assert np.all(f(x) == target)", "f(x)"),
        ("assert abs(f(x) - target) < 1e-6", "f(x)"),
        ("assert np.allclose(g(a)[0], target[0]) and np.allclose(g(a)[1], target[1])", "g(a)"),
        ("assert np.isclose(h(b), (0, -1)).any() == target.any()", "np.isclose(h(b), (0, -1))"),
        ("s, v = target\nassert ok(Z) == s and np.allclose(Z, v)", "(ok(Z), Z)"),
        ("a, b, c = target\nassert a == aa and np.allclose((b, c), (bb, cc))", "(aa, bb, cc)"),
        ("def check():\n    out = f(1)\n    assert np.allclose(out, target)\ncheck()", "out"),
    ],
)
def test_finder_returns_the_expression_compared_with_target(source: str, expected: str) -> None:
    assert find_target_comparison(source).kind == "compared"
    assert unparse(source) == expected


@pytest.mark.parametrize(
    ("source", "reason_part"),
    [
        ("print(target)\nassert np.allclose(f(x), target)", "outside an assert"),
        ("assert np.allclose(f(x), target)\nassert g(x) == target", "2 asserts"),
        ("assert np.allclose(f(target), x)", "cannot tell"),
        ("assert np.allclose(f(x), target) and g(x) == target", "different expressions"),
        ("a, b = target\nassert np.allclose(f(x), a)", "item 1"),
        ("assert f(x) ==", "does not parse"),
    ],
)
def test_finder_reports_what_it_does_not_understand(source: str, reason_part: str) -> None:
    comparison = find_target_comparison(source)
    assert comparison.kind == "unsupported"
    assert comparison.expression is None
    assert reason_part in comparison.reason


def test_finder_tells_tests_that_never_read_target() -> None:
    source = "def test_case_1():\n    out = f(1)\n    assert np.allclose(out, expected)\ntest_case_1()"
    comparison = find_target_comparison(source)
    assert comparison.kind == "no_target"
    assert compared_expression(source) is None


def _all_test_cases(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        return [case for line in handle for step in json.loads(line)["sub_steps"] for case in step["test_cases"]]


@pytest.mark.parametrize(
    ("file_name", "cases", "no_target", "patterns"),
    [("problems_dev.jsonl", 167, 6, 6), ("problems_test.jsonl", 915, 2, 14)],
)
def test_finder_understands_every_official_test_case(
    shared_scicode: Path, file_name: str, cases: int, no_target: int, patterns: int
) -> None:
    counts = survey_comparisons(_all_test_cases(shared_scicode / file_name))
    unsupported = {pattern: n for pattern, n in counts.items() if pattern.startswith("unsupported")}
    assert unsupported == {}
    assert sum(counts.values()) == cases
    assert counts["no target"] == no_target
    assert len(counts) == patterns  # distinct comparison shapes, `no target` included


# ---------------------------------------------------------------------------
# Capture program
# ---------------------------------------------------------------------------


def test_capture_program_replaces_the_assert_and_the_unpacking() -> None:
    source = "from scicode.compare.cmp import cmp_tuple_or_list\na, b = target\nassert np.allclose(x, a) and y == b\n"
    program, comparison = capture_program(source)
    text = ast.unparse(program)
    assert comparison.kind == "compared"
    assert f"{CAPTURE_NAME}((x, y))" in text
    assert text == f"pass\npass\n{CAPTURE_NAME}((x, y))"
    assert "target" not in {node.id for node in ast.walk(program) if isinstance(node, ast.Name)}


def test_capture_program_refuses_helpers_used_outside_the_target_assert() -> None:
    source = "from scicode.compare.cmp import cmp_tuple_or_list\nok = cmp_tuple_or_list(a, b)\nassert f(x) == target"
    with pytest.raises(DerivationError, match="cmp_tuple_or_list"):
        capture_program(source)


def dataset(node: H5Dataset | H5Group) -> H5Dataset:
    assert isinstance(node, H5Dataset), node
    return node


def group(node: H5Dataset | H5Group) -> H5Group:
    assert isinstance(node, H5Group), node
    return node


def test_evaluate_step_shares_one_namespace_and_evaluates_each_expression_once() -> None:
    job = DerivationJob(
        "9.1",
        (
            ("<deps>", "import numpy as np"),
            ("<9.1 reference code>", "calls = []\ndef f(x):\n    calls.append(x)\n    return np.arange(x)"),
        ),
        (
            "n = 3\nassert np.allclose(f(n), target)",
            "assert cmp_tuple_or_list((f(n + 1), len(calls)), target)",
            "assert len(calls) == 2",
            "p, q = target\nassert np.allclose(f(1), p) and q == 'label'",
        ),
    )
    layouts = evaluate_step(job)
    assert len(layouts) == 4
    first = dict(layouts[0].members)
    assert list(first) == ["var1"] and np.array_equal(dataset(first["var1"]).data, np.arange(3))
    second = dict(layouts[1].members)
    assert list(second) == ["var1", "var2"]
    assert np.array_equal(dataset(second["var1"]).data, np.arange(4)) and second["var2"] == H5Dataset(2)
    assert layouts[2] == H5Group((("var1", H5Dataset("None")),))  # the third test passed: f ran exactly twice
    fourth = dict(layouts[3].members)
    assert np.array_equal(dataset(fourth["var1"]).data, np.arange(1)) and fourth["var2"] == H5Dataset("label")


def test_evaluate_step_fails_on_a_wrong_assert_in_a_test_without_target() -> None:
    job = DerivationJob("9.2", (("<code>", "x = 1"),), ("assert x == 2, 'reference disagrees'",))
    with pytest.raises(AssertionError, match="reference disagrees"):
        evaluate_step(job)


# ---------------------------------------------------------------------------
# Official layout
# ---------------------------------------------------------------------------


def _write_and_read(tmp_path: Path, value: object) -> dict[str, object]:
    path = tmp_path / "t.h5"
    write_targets_file(path, {"1.1": [layout_of_test(value)]})
    found: dict[str, object] = {}
    with h5py.File(path, "r") as handle:
        handle["1.1/test1"].visititems(
            lambda name, obj: found.__setitem__(name, obj[()] if isinstance(obj, h5py.Dataset) else "group")
        )
    return found


def array_at(found: dict[str, object], name: str) -> np.ndarray:
    """The dataset `name` of `_write_and_read` as an array (it must be a numeric dataset, not a group)."""
    value = found[name]
    assert isinstance(value, (np.ndarray, np.generic)), (name, value)
    return np.asarray(value)


def test_layout_of_tuples_ragged_lists_dicts_and_strings(tmp_path: Path) -> None:
    found = _write_and_read(tmp_path, (np.ones(2), [1.0, np.zeros(3)], {"a": 1.5, "b": [1, 2]}, "text", None))
    assert np.array_equal(array_at(found, "var1"), np.ones(2))
    assert found["var2"] == "group" and found["var2/list"] == "group"
    assert found["var2/list/var1"] == 1.0 and np.array_equal(array_at(found, "var2/list/var2"), np.zeros(3))
    assert found["var3/a"] == 1.5 and np.array_equal(array_at(found, "var3/b"), [1, 2])
    assert found["var4"] == b"text" and found["var5"] == b"None"


def test_layout_keeps_the_official_writer_type_dispatch() -> None:
    # numpy int32 scalars and unknown objects are stored as their str(), as the official writer does;
    # a list of strings is not one HDF5 array, so it becomes a `list` group.
    assert value_layout(np.int32(7)) == H5Dataset("7")
    assert value_layout(object.__new__(type("Thing", (), {"__str__": lambda self: "thing"}))) == H5Dataset("thing")
    assert isinstance(value_layout(["a", "b"]), H5Group)
    assert dict(group(value_layout({"k": np.int64(3)})).members)["k"] == H5Dataset("3")
    with pytest.raises(DerivationError, match="dict key"):
        value_layout({1.5: 1})


@pytest.mark.parametrize(
    ("matrix", "names"),
    [
        (scipy.sparse.coo_matrix(np.eye(3)), {"data", "shape", "row", "col"}),
        (scipy.sparse.csr_matrix(np.eye(3)), {"data", "shape", "indices", "indptr"}),
        (scipy.sparse.bsr_matrix(np.eye(4), blocksize=(2, 2)), {"data", "shape", "indices", "indptr", "blocksize"}),
    ],
)
def test_layout_of_sparse_matrices(tmp_path: Path, matrix: scipy.sparse.spmatrix, names: set[str]) -> None:
    found = _write_and_read(tmp_path, matrix)
    assert {name.rsplit("/", 1)[1] for name in found if name.startswith("var1/sparse_matrix/")} == names
    assert list(array_at(found, "var1/sparse_matrix/shape")) == list(matrix.shape)


def test_large_arrays_are_gzip_compressed(tmp_path: Path) -> None:
    path = tmp_path / "t.h5"
    small, large = np.ones(GZIP_MIN_BYTES // 8 - 1), np.ones(GZIP_MIN_BYTES // 8)
    write_targets_file(path, {"2.1": [layout_of_test((small, large))]})
    with h5py.File(path, "r") as handle:
        assert handle["2.1/test1/var1"].compression is None
        assert handle["2.1/test1/var2"].compression == "gzip"
        assert handle["2.1/test1/var2"].compression_opts == 9 and handle["2.1/test1/var2"].shuffle


# ---------------------------------------------------------------------------
# Isolated evaluation
# ---------------------------------------------------------------------------

LIMITS = Limits(timeout_seconds=20, memory_mb=4096)


@pytest.mark.parametrize(
    ("code", "status", "reason_part"),
    [
        ("x = 1", "ok", ""),
        (
            "raise RuntimeError('bad reference')",
            "error",
            "RuntimeError: bad reference (at <5.1 reference code> line 1)",
        ),
        ("x = 2", "error", "AssertionError (at <5.1 test2> line 1)"),
        ("raise SystemExit(0)", "error", "SystemExit"),
        ("import os\nos._exit(3)", "crashed", "exit code 3"),
        ("x = bytearray(8 * 1024**3)", "crashed", "MemoryError"),
    ],
)
def test_run_step_isolated_reports_each_outcome(tmp_path: Path, code: str, status: str, reason_part: str) -> None:
    job = DerivationJob("5.1", (("<5.1 reference code>", code),), ("assert x == target", "assert x == 1"))
    outcome = run_step_isolated(job, tmp_path, LIMITS)
    assert outcome.status == status
    assert reason_part in outcome.reason
    expected = (H5Group((("var1", H5Dataset(1)),)), H5Group((("var1", H5Dataset("None")),)))
    assert (outcome.layouts == expected) == (status == "ok")


def test_run_step_isolated_times_out(tmp_path: Path) -> None:
    job = DerivationJob("5.2", (("<code>", "import time\ntime.sleep(30)"),), ("assert 1 == target",))
    started = time.monotonic()
    outcome = run_step_isolated(job, tmp_path, Limits(timeout_seconds=1.5))
    assert outcome.status == "timeout" and time.monotonic() - started < 10


def test_longest_steps_start_first() -> None:
    jobs = [
        DerivationJob(step, (("<c>", "x" * size),), ())
        for step, size in (("1.1", 10), ("2.1", 500), ("3.1", 20), ("4.1", 1))
    ]
    durations = expected_durations(
        freeze_object({"steps": [{"step_id": "3.1", "duration_s": 9.0}, {"step_id": "4.1", "duration_s": 30.0}]})
    )
    assert [job.step_id for job in longest_first(jobs, durations)] == ["4.1", "3.1", "2.1", "1.1"]


# ---------------------------------------------------------------------------
# Derivation against the shared validation targets
# ---------------------------------------------------------------------------


def _stage_small_problems(shared: Path, data_dir: Path) -> None:
    (data_dir / "scicode").mkdir(parents=True)
    for name in (
        "problems_test.jsonl",
        "multistep_template.txt",
        "background_comment_template.txt",
        "13.6.txt",
        "62.1.txt",
        "76.3.txt",
    ):
        shutil.copyfile(shared / name, data_dir / "scicode" / name)
    kept = []
    with open(shared / "problems_dev.jsonl", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            if record["problem_id"] in SMALL_PROBLEMS:
                record["sub_steps"] = record["sub_steps"][: SMALL_PROBLEMS[record["problem_id"]]]
                kept.append(json.dumps(record))
    (data_dir / "scicode" / "problems_dev.jsonl").write_text("\n".join(kept) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def small_derivation(tmp_path_factory: pytest.TempPathFactory, shared_scicode: Path) -> tuple[Path, dict]:
    data_dir = tmp_path_factory.mktemp("small") / "data"
    _stage_small_problems(shared_scicode, data_dir)
    record = derive_targets(load_settings({"data_dir": str(data_dir), "score_workers": "2"}))
    return data_dir, record


def test_small_derivation_matches_the_shared_validation_targets(
    small_derivation: tuple[Path, dict], shared_scicode: Path
) -> None:
    data_dir, record = small_derivation
    settings = load_settings({"data_dir": str(data_dir)})
    step_ids = [step["step_id"] for step in record["steps"]]
    assert record["status"] == "complete"
    assert record["counts"] == {
        "problems": 4,
        "steps": 15,
        "steps_ok": 15,
        "steps_failed": 0,
        "tests": 49,
        "tests_without_target": 6,
    }
    assert {"3.1", "10.3", "70.6", "78.1", "78.3"} <= set(step_ids)
    derived = settings.data_paths.derived_targets
    assert target_file_differences(derived, shared_scicode / DEV_TARGETS, steps=step_ids) == []
    with h5py.File(derived, "r") as handle:
        assert sorted(handle.keys()) == sorted(step_ids)
        assert handle["78.1/test2/var1"][()] == b"None"
    assert read_artifact(derived_record_path(settings.data_paths), "targets") == record


def test_file_comparison_sees_a_wrong_value(
    small_derivation: tuple[Path, dict], shared_scicode: Path, tmp_path: Path
) -> None:
    data_dir, _ = small_derivation
    copy = tmp_path / "changed.h5"
    shutil.copyfile(data_dir / "scicode" / "derived_targets.h5", copy)
    with h5py.File(copy, "r+") as handle:
        handle["3.1/test1/var1"][()] = handle["3.1/test1/var1"][()] * 1.001
        del handle["70.6/test1/var1/list/var3"]
    differences = target_file_differences(copy, shared_scicode / DEV_TARGETS, steps=["3.1", "70.6"])
    assert differences == [
        "/3.1/test1/var1: values differ beyond rtol=1e-06 atol=1e-12",
        "/70.6/test1/var1/list/var3: missing",
    ]


def test_current_derivation_is_reused_and_a_changed_problem_file_is_not_current(
    small_derivation: tuple[Path, dict], tmp_path: Path
) -> None:
    data_dir, record = small_derivation
    settings = load_settings({"data_dir": str(data_dir)})
    assert derived_targets_current(settings)
    assert derived_targets_fingerprint(settings) == record["fingerprint"]
    started = time.monotonic()
    assert derive_targets(settings) == record
    assert time.monotonic() - started < 2

    changed_dir = tmp_path / "data"
    shutil.copytree(data_dir, changed_dir)
    changed = load_settings({"data_dir": str(changed_dir)})
    assert derived_targets_current(changed)
    problems_file = changed_dir / "scicode" / "problems_dev.jsonl"
    problems_file.write_text(problems_file.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert not derived_targets_current(changed)
    assert derived_targets_fingerprint(changed) != record["fingerprint"]


def test_a_failing_step_is_reported_and_left_out(tmp_path: Path, shared_scicode: Path) -> None:
    data_dir = tmp_path / "data"
    _stage_small_problems(shared_scicode, data_dir)
    problems_file = data_dir / "scicode" / "problems_dev.jsonl"
    records = [json.loads(line) for line in problems_file.read_text(encoding="utf-8").splitlines()]
    records = [r for r in records if r["problem_id"] == "3"]
    records[0]["sub_steps"][0]["ground_truth_code"] += "\nraise ValueError('broken reference')\n"
    problems_file.write_text(json.dumps(records[0]) + "\n", encoding="utf-8")
    settings = load_settings({"data_dir": str(data_dir)})
    record = derive_targets(settings)
    assert record["status"] == "failed"
    first = steps_of(record)[0]
    assert first["status"] == "error" and "broken reference" in json_str(first["reason"])
    assert not derived_targets_current(settings)
    assert resolve_targets(settings).kind == "missing"


@pytest.mark.slow
def test_full_derivation_matches_all_fifty_validation_steps(
    embedded_default_run: EmbeddedDefaultRun, shared_scicode: Path
) -> None:
    """The targets the embedded default run derived (its `targets` task, all 50 validation steps) against the
    official validation targets."""
    settings = load_settings({"data_dir": str(embedded_default_run.data_dir)})
    record = read_artifact(derived_record_path(settings.data_paths), "targets")
    assert record is not None, embedded_default_run.result.stderr[-2000:]
    assert derived_targets_current(settings)
    assert record["status"] == "complete", [s for s in steps_of(record) if s["status"] != "ok"]
    assert json_at(record, "counts", "steps") == 50 and json_at(record, "counts", "tests") == 167
    assert target_file_differences(settings.data_paths.derived_targets, shared_scicode / DEV_TARGETS) == []
    with (
        h5py.File(settings.data_paths.derived_targets, "r") as derived,
        h5py.File(shared_scicode / DEV_TARGETS, "r") as official,
    ):
        assert sorted(derived.keys()) == sorted(official.keys())
    assert json_number(record["duration_s"]) < 600


# ---------------------------------------------------------------------------
# Resolution
# ---------------------------------------------------------------------------


def _download(data_dir: Path, **extra: str) -> None:
    run_download(load_settings({"data_dir": str(data_dir), "dataset_zip_url": "", **extra}))


def test_resolve_official_targets_from_the_manifest(staged_data_dir: Path) -> None:
    official = staged_data_dir / "scicode" / "test_data.h5"
    official.write_bytes(b"not the real file")
    _download(staged_data_dir, verify_checksums="false")
    resolved = resolve_targets(load_settings({"data_dir": str(staged_data_dir), "dataset_zip_url": ""}))
    assert resolved.kind == "official"
    assert resolved.path == official
    assert resolved.sha256 and len(resolved.sha256) == 64


def test_resolve_explicit_targets(staged_data_dir: Path, tmp_path: Path) -> None:
    explicit = tmp_path / "mine.h5"
    explicit.write_bytes(b"explicit")
    _download(staged_data_dir, h5py_file=str(explicit))
    resolved = resolve_targets(load_settings({"data_dir": str(staged_data_dir), "h5py_file": str(explicit)}))
    assert (resolved.kind, resolved.path) == ("explicit", explicit)
    other = load_settings({"data_dir": str(staged_data_dir), "h5py_file": str(tmp_path / "other.h5")})
    assert resolve_targets(other).kind == "missing"  # the manifest describes another file


def test_resolve_never_replaces_an_explicit_file_by_derived_targets(
    small_derivation: tuple[Path, dict], tmp_path: Path
) -> None:
    data_dir, _ = small_derivation
    settings = load_settings({"data_dir": str(data_dir), "h5py_file": str(tmp_path / "mine.h5")})
    assert derived_targets_current(settings)
    resolved = resolve_targets(settings)
    assert (resolved.kind, resolved.path) == ("missing", None)
    assert "no download manifest" in resolved.note


def test_resolve_derived_targets_when_official_ones_are_missing(
    small_derivation: tuple[Path, dict], tmp_path: Path
) -> None:
    source_dir, record = small_derivation
    data_dir = tmp_path / "data"
    shutil.copytree(source_dir, data_dir)
    _download(data_dir, verify_checksums="false")  # the staged problem file holds a subset of the problems
    settings = load_settings({"data_dir": str(data_dir)})
    assert read_record(settings.data_paths.manifest, "manifest")["targets"]["kind"] == "missing"
    resolved = resolve_targets(settings)
    assert resolved == ResolvedTargets("derived", settings.data_paths.derived_targets, record["sha256"], resolved.note)
    assert resolved.note.endswith("validation steps")


def test_resolve_missing_targets(staged_data_dir: Path) -> None:
    settings = load_settings({"data_dir": str(staged_data_dir)})
    resolved = resolve_targets(settings)
    assert (resolved.kind, resolved.path, resolved.sha256) == ("missing", None, None)
    assert "no download manifest" in resolved.note and "no derived targets" in resolved.note
    _download(staged_data_dir)
    assert "official targets test_data.h5 not found" in resolve_targets(settings).note


def test_step_jobs_carry_the_reference_code_of_earlier_steps(staged_data_dir: Path) -> None:
    problems = load_split(load_settings({"data_dir": str(staged_data_dir)}).data_paths, "validation")
    jobs = {
        job.step_id: job for job in step_jobs(load_settings({"data_dir": str(staged_data_dir)}).data_paths, problems)
    }
    assert len(jobs) == 50
    assert [label for label, _ in jobs["47.3"].preamble] == [
        "<47 required_dependencies>",
        "<47.1 reference code>",
        "<47.2 reference code>",
        "<47.3 reference code>",
    ]
