"""Test-script assembly for one step, as the official protocol defines it.

A step's script is `required_dependencies` + the code of every earlier step + this step's code + the
target loading + the official test cases in order, each preceded by its `target`. Earlier steps
contribute what they carry into later prompts (`stages.benchmark.protocol.carried_forward` under the run's
`carry`: the whole code, or only the definition the header names); prefilled steps (13.6, 62.1,
76.3) contribute their official file verbatim; the current step contributes its full code.
`official_text` renders it exactly as an official script file (used by the benchmark's plain runner). That
rendering joins the sections with blank lines and so loses where one ends and the next begins, while the test
process runs each section on its own under its label: the verdict cache keys on `sent_parts` instead, the parts
exactly as the engine frames them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from stages.benchmark.problems import Problem
from stages.benchmark.protocol import Carry, carried_forward
from stages.storage.json_values import JSONObject
from stages.storage.paths import DataPaths

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

    def sent_parts(self) -> JSONObject:
        """What the engine sends of this script, each part whole and apart: the step id, the dependencies, every
        section with its label, every test cell. Both processes' specs (`engine.StepJob.test_spec` and
        `checker_spec`) are made from these alone by the verdict code, so two scripts whose parts differ anywhere
        (a line moved from one section to the end of the one before it) differ here."""
        return {
            "step_id": self.step_id,
            "deps": self.deps,
            "sections": [{"label": section.label, "code": section.code} for section in self.sections],
            "tests": list(self.tests),
        }

    def official_text(self, targets_path: str) -> str:
        """The official script: code, helper import, targets, then each test after its `target`."""
        lines = [
            self.deps,
            "",
            self.code,
            "",
            HELPER_IMPORT,
            f"targets = process_hdf5_to_tuple({self.step_id!r}, {len(self.tests)}, {targets_path!r})",
        ]
        for index, test in enumerate(self.tests):
            lines.append(f"target = targets[{index}]")
            lines.append("")
            lines.append(test)
        return "\n".join(lines) + "\n"


def build_step_script(
    problem: Problem, step_index: int, codes: Mapping[str, str | None], data_paths: DataPaths, carry: Carry
) -> StepScript:
    """The script of `problem.steps[step_index]` from the generated `codes` (step id -> code)."""
    step = problem.steps[step_index]
    sections = [
        CodeSection(
            f"step {earlier.step_id} code", carried_forward(earlier, codes.get(earlier.step_id), data_paths, carry)
        )
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
