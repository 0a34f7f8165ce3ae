"""Typed records of the SciCode problems, loaded from the staged data folder."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from stages.benchmark.categories import Category, category_of
from stages.benchmark.pins import pins, prefilled_steps, split_files
from stages.errors import PipelineError
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

    @property
    def prefilled(self) -> bool:
        return self.step_id in prefilled_steps()


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


class ProblemDataError(PipelineError, ValueError):
    """The problem files are missing or malformed."""


def _step_from_record(record: dict[str, Any], index: int) -> Step:
    return Step(
        step_id=str(record["step_number"]),
        index=index,
        description=record.get("step_description_prompt") or "",
        background=record.get("step_background") or "",
        function_header=record.get("function_header") or "",
        return_line=record.get("return_line") or "",
        test_cases=tuple(record.get("test_cases") or ()),
        ground_truth_code=record.get("ground_truth_code"),
    )


def problem_from_record(record: dict[str, Any], split: ProblemSplit) -> Problem:
    try:
        steps = tuple(_step_from_record(step, index) for index, step in enumerate(record["sub_steps"]))
        return Problem(
            problem_id=str(record["problem_id"]),
            name=record.get("problem_name") or "",
            split=split,
            taxonomy=category_of(str(record["problem_id"]), record),
            required_dependencies=record.get("required_dependencies") or "",
            steps=steps,
            fingerprint=fingerprint(record),
        )
    except (KeyError, TypeError) as error:
        raise ProblemDataError(f"malformed problem record {record.get('problem_id', '?')}: missing {error}") from None


@lru_cache(maxsize=8)
def _load_split_file(path: Path, mtime_ns: int, split: ProblemSplit) -> tuple[Problem, ...]:
    problems = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                raise ProblemDataError(f"{path}:{line_number}: not valid JSON") from None
            problems.append(problem_from_record(record, split))
    return tuple(problems)


def load_split(data_paths: DataPaths, split: ProblemSplit) -> tuple[Problem, ...]:
    path = data_paths.file(split_files()[split])
    try:
        mtime = path.stat().st_mtime_ns
    except FileNotFoundError:
        raise ProblemDataError(f"missing {path}: run `doit download` first") from None
    return _load_split_file(path.resolve(), mtime, split)


def load_problems(data_paths: DataPaths, split: str = "all") -> tuple[Problem, ...]:
    """Problems of `split` (validation, test or all) in official order: validation file first, then test."""
    order: tuple[ProblemSplit, ...] = ("validation", "test") if split == "all" else (split,)  # type: ignore[assignment]
    return tuple(problem for name in order for problem in load_split(data_paths, name))


def problems_by_id(data_paths: DataPaths) -> dict[str, Problem]:
    return {problem.problem_id: problem for problem in load_problems(data_paths, "all")}


def problem_by_id(data_paths: DataPaths, problem_id: str) -> Problem:
    """One problem of either split; ProblemDataError naming the id when it is not in the staged files."""
    problems = problems_by_id(data_paths)
    if problem_id not in problems:
        raise ProblemDataError(
            f"unknown problem id {problem_id!r}: not in the problem files under {data_paths.scicode_dir}"
        )
    return problems[problem_id]


def prefilled_code(data_paths: DataPaths, step_id: str) -> str | None:
    """The official code of a prefilled step, verbatim; None for ordinary steps."""
    file_name = prefilled_steps().get(step_id)
    if file_name is None:
        return None
    return data_paths.file(file_name).read_text(encoding="utf-8")


def template_text(data_paths: DataPaths, with_background: bool) -> str:
    name = "multistep_template.txt" if with_background else "background_comment_template.txt"
    return data_paths.file(name).read_text(encoding="utf-8")


def prefilled_reason() -> str:
    return str(pins()["prefilled_reason"])
