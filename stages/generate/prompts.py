"""The official SciCode step prompt, built exactly as the reference harness builds it.

For the next step k (1-based), each earlier step i < k contributes its description (plus a newline
and its background when `with_background`), then the code it carries forward, then a "------"
separator; the parts are joined with blank lines and the last separator is dropped. The next step
contributes its description (and background) and its function header followed by its return line.
The problem-level description, background and io are not sent.

Code carried forward (`stages.benchmark.protocol.carried_forward`): under `carry=full` a generated step's whole
code, under `carry=definition` the definition its header names; an official prefilled step's file
verbatim in both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stages.benchmark.problems import Problem, Step, template_text
from stages.benchmark.protocol import defined_name
from stages.storage.artifacts import fingerprint
from stages.storage.paths import DataPaths

STEP_SEPARATOR = "------"


@dataclass(frozen=True)
class StepPrompt:
    step_id: str
    text: str
    fingerprint: str
    defines: str | None  # the name the step's header defines (an unfenced answer must define it)


def step_text(step: Step, with_background: bool) -> str:
    """A step's description, followed by its background when backgrounds are on."""
    if with_background:
        return step.description + "\n" + step.background
    return step.description


def next_step_text(step: Step, with_background: bool) -> str:
    """The next-step block: description (and background), then the header and the return line."""
    header_and_return = step.function_header + "\n\n" + step.return_line
    return "\n\n".join([step_text(step, with_background), header_and_return])


def problem_steps_text(earlier_steps: Sequence[Step], carried: Sequence[str], with_background: bool) -> str:
    """The earlier steps with their carried code, separated by "------" (the last separator dropped)."""
    if len(earlier_steps) != len(carried):
        raise ValueError(f"{len(earlier_steps)} earlier steps but {len(carried)} carried codes")
    lines: list[str] = []
    for step, code in zip(earlier_steps, carried):
        lines.extend([step_text(step, with_background), code, STEP_SEPARATOR])
    return "\n\n".join(lines[:-1])


def fill_template(
    template: str, problem: Problem, step_index: int, carried: Sequence[str], with_background: bool
) -> str:
    """The prompt for `problem.steps[step_index]` given the code carried by every earlier step."""
    earlier = problem.steps[:step_index]
    return template.format(
        problem_steps_str=problem_steps_text(earlier, carried, with_background),
        next_step_str=next_step_text(problem.steps[step_index], with_background),
        dependencies=problem.required_dependencies,
    )


def prompt_fingerprint(prompt_text: str, generate_settings_fingerprint: str) -> str:
    return fingerprint({"prompt": prompt_text, "generate": generate_settings_fingerprint})


def build_step_prompt(
    problem: Problem,
    step_index: int,
    carried: Sequence[str],
    *,
    data_paths: DataPaths,
    with_background: bool,
    generate_settings_fingerprint: str,
) -> StepPrompt:
    """The official prompt of one step and its fingerprint (prompt text + generate settings)."""
    step = problem.steps[step_index]
    if step.prefilled:
        raise ValueError(f"step {step.step_id} is an official prefilled step: it is never sent to the model")
    text = fill_template(template_text(data_paths, with_background), problem, step_index, carried, with_background)
    fingerprint_value = prompt_fingerprint(text, generate_settings_fingerprint)
    return StepPrompt(step.step_id, text, fingerprint_value, defined_name(step.function_header))
