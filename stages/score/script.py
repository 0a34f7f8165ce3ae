"""Test-script assembly for one step, as the official protocol defines it.

A step's script is `required_dependencies` + the code of every earlier step + this step's code + the
target loading + the official test cases in order, each preceded by its `target`. Earlier steps
contribute `carried_code(code, header)` (only the definition the header names, a class whole);
prefilled steps (13.6, 62.1, 76.3) contribute their official file verbatim; the current step
contributes its full code. `official_text` renders it exactly as an official script file (used by
the benchmark's plain runner and as the verdict cache key); the harness receives the same parts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from stages.paths import DataPaths
from stages.problems import Problem, Step, prefilled_code
from stages.protocol import carried_code

HELPER_IMPORT = "from scicode.parse.parse import process_hdf5_to_tuple"


@dataclass(frozen=True)
class CodeSection:
    label: str
    code: str


@dataclass(frozen=True)
class StepScript:
    problem_id: str
    step_id: str
    deps: str
    sections: tuple[CodeSection, ...]
    tests: tuple[str, ...]

    @property
    def code(self) -> str:
        return "\n\n".join(section.code for section in self.sections)

    def official_text(self, targets_path: str) -> str:
        """The official script: code, helper import, targets, then each test after its `target`."""
        lines = [self.deps, "", self.code, "", HELPER_IMPORT, f"targets = process_hdf5_to_tuple({self.step_id!r}, {len(self.tests)}, {targets_path!r})"]
        for index, test in enumerate(self.tests):
            lines.append(f"target = targets[{index}]")
            lines.append("")
            lines.append(test)
        return "\n".join(lines) + "\n"


def earlier_step_code(data_paths: DataPaths, step: Step, code: str | None) -> str:
    """What an earlier step contributes: the official file of a prefilled step, else the carried definition."""
    official = prefilled_code(data_paths, step.step_id)
    if official is not None:
        return official
    if not code:
        return ""
    return carried_code(code, step.function_header)


def build_step_script(problem: Problem, step_index: int, codes: Mapping[str, str | None], data_paths: DataPaths) -> StepScript:
    """The script of `problem.steps[step_index]` from the generated `codes` (step id -> code)."""
    step = problem.steps[step_index]
    sections = [
        CodeSection(f"step {earlier.step_id} code", earlier_step_code(data_paths, earlier, codes.get(earlier.step_id)))
        for earlier in problem.steps[:step_index]
    ]
    current = codes.get(step.step_id)
    if current is None:
        raise ValueError(f"step {step.step_id} has no code to test")
    sections.append(CodeSection(f"step {step.step_id} code", current))
    return StepScript(
        problem_id=problem.problem_id,
        step_id=step.step_id,
        deps=problem.required_dependencies,
        sections=tuple(section for section in sections if section.code.strip()),
        tests=tuple(step.test_cases),
    )
