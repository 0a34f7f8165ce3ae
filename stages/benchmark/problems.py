"""Typed records of the SciCode problems, and `Benchmark`: a dataset bound to a data folder, which every stage asks
for its problems, prefilled code and templates (the run's is `Settings.benchmark`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from stages.benchmark import manifest_bound
from stages.benchmark.categories import Category, category_of
from stages.benchmark.datasets import DEFAULT_DATASET, Dataset, dataset_named
from stages.benchmark.datasets import ProblemDataError as ProblemDataError
from stages.storage.artifacts import fingerprint
from stages.storage.paths import DataPaths

ProblemSplit = Literal["validation", "test"]


@dataclass(frozen=True)
class Step:
    step_id: str
    index: int
    description: str
    background: str
    function_header: str
    return_line: str
    test_cases: tuple[str, ...]
    ground_truth_code: str | None
    prefilled_file: str = ""  # the file of its official code when the dataset prefills this step

    @property
    def prefilled(self) -> bool:
        return bool(self.prefilled_file)


@dataclass(frozen=True)
class Problem:
    problem_id: str
    name: str
    split: ProblemSplit
    taxonomy: Category
    required_dependencies: str
    steps: tuple[Step, ...]
    fingerprint: str

    @property
    def field(self) -> str:
        return self.taxonomy.field

    @property
    def subfield(self) -> str:
        return self.taxonomy.subfield

    @property
    def category(self) -> str:
        """`Field / Subfield`, as stored in selection.json and the details files."""
        return self.taxonomy.label

    @property
    def scored_steps(self) -> tuple[Step, ...]:
        return tuple(step for step in self.steps if not step.prefilled)

    @property
    def has_reference_code(self) -> bool:
        return all(step.ground_truth_code for step in self.steps if not step.prefilled)


def _step_from_record(record: dict[str, Any], index: int, prefilled: Mapping[str, str]) -> Step:
    return Step(
        step_id=str(record["step_number"]),
        index=index,
        description=record.get("step_description_prompt") or "",
        background=record.get("step_background") or "",
        function_header=record.get("function_header") or "",
        return_line=record.get("return_line") or "",
        test_cases=tuple(record.get("test_cases") or ()),
        ground_truth_code=record.get("ground_truth_code"),
        prefilled_file=prefilled.get(str(record["step_number"]), ""),
    )


def problem_from_record(record: dict[str, Any], split: ProblemSplit, dataset: Dataset | None = None) -> Problem:
    """One problem record of `dataset` (default: the original), its prefilled steps marked."""
    prefilled = (dataset or dataset_named(DEFAULT_DATASET)).prefilled_steps
    try:
        steps = tuple(_step_from_record(step, index, prefilled) for index, step in enumerate(record["sub_steps"]))
        return Problem(
            problem_id=str(record["problem_id"]),
            name=record.get("problem_name") or "",
            split=split,
            taxonomy=category_of(str(record["problem_id"]), record),
            required_dependencies=record.get("required_dependencies") or "",
            steps=steps,
            fingerprint=fingerprint(record),
        )
    except KeyError as error:
        raise ProblemDataError(f"malformed problem record {record.get('problem_id', '?')}: missing {error}") from None
    except (TypeError, AttributeError) as error:
        raise ProblemDataError(f"malformed problem record {record.get('problem_id', '?')}: {error}") from None


@lru_cache(maxsize=8)
def _load_split_file(path: Path, mtime_ns: int, split: ProblemSplit, dataset_name: str) -> tuple[Problem, ...]:
    dataset = dataset_named(dataset_name)
    problems = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                raise ProblemDataError(f"{path}:{line_number}: not valid JSON") from None
            if not isinstance(record, dict):
                raise ProblemDataError(f"{path}:{line_number}: not a JSON object")
            problems.append(problem_from_record(record, split, dataset))
    return tuple(problems)


@dataclass(frozen=True)
class Benchmark:
    """A dataset bound to a data folder: its staged files, problems, prefilled code and templates."""

    dataset: Dataset
    data_dir: Path

    @property
    def name(self) -> str:
        return self.dataset.name

    @property
    def folder(self) -> Path:
        """`<data_dir>/<the dataset's folder>`: its problem files (and its manifest and targets, when bound)."""
        return Path(self.data_dir) / self.dataset.folder

    @property
    def shared(self) -> DataPaths:
        """The folder of the official templates and prefilled code (the original files' folder)."""
        return DataPaths(Path(self.data_dir))

    @property
    def record_path(self) -> Path:
        """The download stage's record of this dataset's staged files."""
        return self.folder / self.dataset.record_file

    def file(self, name: str) -> Path:
        return self.folder / name

    @property
    def published_manifest_path(self) -> Path | None:
        binding = self.dataset.manifest
        return None if binding is None else self.folder / binding.file

    def problems_staged(self) -> bool:
        """Whether every problem file (and the manifest binding them) is in place."""
        names = (*self.dataset.problem_files, *((self.dataset.manifest.file,) if self.dataset.manifest else ()))
        return all(self.file(name).is_file() for name in names)

    def problems_md5(self) -> str | None:
        """The md5 of the problem file that the dataset's published manifest states (None when not bound)."""
        binding, manifest_path = self.dataset.manifest, self.published_manifest_path
        if binding is None or manifest_path is None:
            return None
        return manifest_bound.manifest_problems_md5(
            manifest_bound.read_published_manifest(manifest_path, binding), binding
        )

    def split(self, split: ProblemSplit) -> tuple[Problem, ...]:
        """The problems of one split file, checked against the manifest when the dataset is bound, in file order,
        the excluded problems left out."""
        if split not in self.dataset.splits:
            raise ProblemDataError(
                f"invalid split={split} with dataset={self.name}: expected one of all, {', '.join(self.dataset.splits)}"
            )
        path = self.file(self.dataset.splits[split])
        try:
            mtime = path.stat().st_mtime_ns
        except FileNotFoundError:
            raise ProblemDataError(f"missing {path}: run `doit download` first") from None
        self._check_bound_file(path)
        problems = _load_split_file(path.resolve(), mtime, split, self.dataset.name)
        self._check_bound_order(path, problems)
        return tuple(problem for problem in problems if problem.problem_id not in self.dataset.excluded_problems)

    def _check_bound_file(self, path: Path) -> None:
        binding, manifest_path = self.dataset.manifest, self.published_manifest_path
        if binding is None or manifest_path is None:
            return
        manifest = manifest_bound.read_published_manifest(manifest_path, binding)
        manifest_bound.check_file_md5(path, manifest_bound.manifest_problems_md5(manifest, binding), manifest_path)

    def _check_bound_order(self, path: Path, problems: tuple[Problem, ...]) -> None:
        binding, manifest_path = self.dataset.manifest, self.published_manifest_path
        if binding is None or manifest_path is None:
            return
        manifest = manifest_bound.read_published_manifest(manifest_path, binding)
        manifest_bound.check_problem_order([problem.problem_id for problem in problems], manifest, binding, path)

    def problems(self, split: str = "all") -> tuple[Problem, ...]:
        """Problems of `split` (a split of the dataset, or all) in official order (the dataset's split order)."""
        if not self.dataset.has_split(split):
            raise ProblemDataError(
                f"invalid split={split} with dataset={self.name}: expected one of all, {', '.join(self.dataset.splits)}"
            )
        names: tuple[ProblemSplit, ...] = self.dataset.split_names(split)  # type: ignore[assignment]
        return tuple(problem for name in names for problem in self.split(name))

    def problems_by_id(self) -> dict[str, Problem]:
        return {problem.problem_id: problem for problem in self.problems("all")}

    def problem(self, problem_id: str) -> Problem:
        """One problem of any split; ProblemDataError naming the id when it is not in the staged files."""
        problems = self.problems_by_id()
        if problem_id not in problems:
            raise ProblemDataError(
                f"unknown problem id {problem_id!r}: not in the problem files of dataset={self.name} under {self.folder}"
            )
        return problems[problem_id]

    def prefilled_code(self, step: Step) -> str | None:
        """The official code of a prefilled step, verbatim; None for ordinary steps."""
        return prefilled_code(self.shared, step)

    def template(self, with_background: bool) -> str:
        return template_text(self.shared, with_background)

    def reference_seconds(self) -> dict[str, float]:
        """Measured wall times of the slow reference steps, by step id."""
        return dict(self.dataset.reference_step_seconds)


def benchmark_of(dataset: str, data_dir: Path) -> Benchmark:
    return Benchmark(dataset_named(dataset), Path(data_dir))


def original(data_paths: DataPaths) -> Benchmark:
    """The original dataset under `data_paths` (for tools and tests that read the official files directly)."""
    return benchmark_of(DEFAULT_DATASET, data_paths.data_dir)


def load_split(data_paths: DataPaths, split: ProblemSplit) -> tuple[Problem, ...]:
    """One split of the original dataset under `data_paths`."""
    return original(data_paths).split(split)


def load_problems(data_paths: DataPaths, split: str = "all") -> tuple[Problem, ...]:
    """Problems of `split` (validation, test or all) of the original dataset: validation file first, then test."""
    return original(data_paths).problems(split)


def problems_by_id(data_paths: DataPaths) -> dict[str, Problem]:
    return original(data_paths).problems_by_id()


def problem_by_id(data_paths: DataPaths, problem_id: str) -> Problem:
    """One problem of the original dataset under `data_paths`."""
    return original(data_paths).problem(problem_id)


def prefilled_code(data_paths: DataPaths, step: Step) -> str | None:
    """The official code of a prefilled step, verbatim, from the shared folder; None for ordinary steps."""
    if not step.prefilled_file:
        return None
    return data_paths.file(step.prefilled_file).read_text(encoding="utf-8")


def template_text(data_paths: DataPaths, with_background: bool) -> str:
    name = "multistep_template.txt" if with_background else "background_comment_template.txt"
    return data_paths.file(name).read_text(encoding="utf-8")
