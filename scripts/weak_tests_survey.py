"""Produce `stages/benchmark/weak_tests.json`: the steps whose official tests a trivial answer passes.

    python -m scripts.weak_tests_survey [--data ../shared/scicode] [--targets FILE] [--workers N] [--output FILE]

For every scored step of the validation split (the steps whose targets we have: `test_data_dev.h5` beside the
problem files, or `--targets`), each trivial answer below replaces the step's code, the earlier steps carry
their reference code, and the step is scored exactly as the score stage scores it (`build_step_script`, the
official tests rewritten for the checker, the real engine: test process and checker). A step is listed when
some trivial answer passes every official test:

- `zeros`: the step's function returns zeros of its output's shape: the reference code is run, and its output
  mapped to zeros of the same structure and type (arrays `numpy.zeros_like`, numbers 0, booleans False,
  strings "", containers item by item);
- `input:<parameter>`: the function returns that argument unchanged, for each named parameter;
- `constant:<value>`: the function returns the constant (0, 1, True, False, None).
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import json
import platform
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from stages.benchmark.problems import Problem, Step, load_split
from stages.benchmark.protocol import DEFAULT_CARRY, defined_name
from stages.benchmark.weak_tests import WEAK_TESTS_FILE
from stages.execution.confinement import check_confinement
from stages.execution.safe_ast import parse_untrusted
from stages.execution.versions import package_versions
from stages.records.verdict import StepVerdict
from stages.score.parent.limits import StepLimits
from stages.score.parent.request import StepRequest, job_for_script, run_request
from stages.score.parent.script import build_step_script
from stages.storage.paths import DataPaths

CONSTANTS: tuple[str, ...] = ("0", "1", "True", "False", "None")
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "scicode"
TARGETS_NAME = "test_data_dev.h5"
TIMEOUT_SECONDS = 300.0
MEMORY_MB = 8192
PRODUCED_BY = "python -m scripts.weak_tests_survey"

ZEROS_HELPER = '''
def _scicode_zeros_like(value):
    """Zeros of the structure and type of `value` (a trivial answer of the weak-test survey)."""
    import numpy

    if value is None:
        return None
    if isinstance(value, (bool, numpy.bool_)):
        return type(value)(False)
    if isinstance(value, numpy.ndarray):
        return numpy.zeros_like(value)
    if isinstance(value, numpy.generic):
        return value.dtype.type(0)
    if isinstance(value, (int, float, complex)):
        return type(value)(0)
    if isinstance(value, str):
        return ""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_scicode_zeros_like(item) for item in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_scicode_zeros_like(item) for item in value)
    if isinstance(value, dict):
        return {key: _scicode_zeros_like(item) for key, item in value.items()}
    import scipy.sparse

    if scipy.sparse.issparse(value):
        return type(value)(value.shape, dtype=value.dtype)
    import sympy

    if isinstance(value, sympy.MatrixBase):
        return sympy.zeros(*value.shape)
    if isinstance(value, sympy.Basic):
        return sympy.Integer(0)
    raise TypeError(f"no zeros of the shape of a {type(value).__name__}")
'''


@dataclass(frozen=True)
class TrivialAnswer:
    name: str  # zeros, input:<parameter>, constant:<value>
    description: str  # "returning zeros of the output's shape", in the reason of a listed step
    code: str


# ---------------------------------------------------------------------------
# Trivial answers of one step
# ---------------------------------------------------------------------------


def _body_indent(header: str) -> str:
    last = [line for line in header.rstrip().splitlines() if line.strip()][-1]
    return last[: len(last) - len(last.lstrip())] or "    "


def _function(header: str) -> ast.FunctionDef | None:
    """The header's function definition (the header is a `def` line and its docstring)."""
    tree = parse_untrusted(f"{header.rstrip()}\n{_body_indent(header)}pass\n")
    node = tree.body[0] if tree is not None and tree.body else None
    return node if isinstance(node, ast.FunctionDef) else None


def _returning(header: str, expression: str) -> str:
    return f"{header.rstrip()}\n{_body_indent(header)}return {expression}\n"


def _call_arguments(function: ast.FunctionDef) -> str:
    """The header's parameters passed on as they came: `a, b, *args, key=key, **kwargs`."""
    arguments = function.args
    parts = [argument.arg for argument in (*arguments.posonlyargs, *arguments.args)]
    if arguments.vararg is not None:
        parts.append(f"*{arguments.vararg.arg}")
    parts += [f"{argument.arg}={argument.arg}" for argument in arguments.kwonlyargs]
    if arguments.kwarg is not None:
        parts.append(f"**{arguments.kwarg.arg}")
    return ", ".join(parts)


def zeros_answer(step: Step) -> TrivialAnswer | None:
    function = _function(step.function_header)
    if function is None or not step.ground_truth_code:
        return None
    reference = (
        f"_scicode_reference = dict(globals())\n"
        f"exec(compile({step.ground_truth_code!r}, '<reference code of {step.step_id}>', 'exec'), _scicode_reference)\n"
    )
    call = f"_scicode_reference[{function.name!r}]({_call_arguments(function)})"
    code = ZEROS_HELPER + "\n" + reference + "\n" + _returning(step.function_header, f"_scicode_zeros_like({call})")
    return TrivialAnswer("zeros", "returning zeros of the output's shape", code)


def input_answers(step: Step) -> list[TrivialAnswer]:
    function = _function(step.function_header)
    if function is None:
        return []
    arguments = function.args
    names = [argument.arg for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
    return [
        TrivialAnswer(
            f"input:{name}", f"returning its input `{name}` unchanged", _returning(step.function_header, name)
        )
        for name in names
    ]


def constant_answers(step: Step) -> list[TrivialAnswer]:
    if _function(step.function_header) is None:
        return []
    return [
        TrivialAnswer(f"constant:{value}", f"returning the constant {value}", _returning(step.function_header, value))
        for value in CONSTANTS
    ]


def trivial_answers(step: Step) -> list[TrivialAnswer]:
    """Every trivial answer of a step whose header is a function (a class step has none)."""
    zeros = zeros_answer(step)
    return [*([zeros] if zeros else []), *input_answers(step), *constant_answers(step)]


# ---------------------------------------------------------------------------
# Scoring them with the real engine
# ---------------------------------------------------------------------------


@functools.cache
def survey_limits() -> StepLimits:
    """What every trial step runs under: this interpreter, the survey's time and memory limits."""
    return StepLimits(sys.executable, TIMEOUT_SECONDS, MEMORY_MB, check_confinement("auto", sys.executable))


def score_answer(
    problem: Problem, index: int, answer: TrivialAnswer, data_paths: DataPaths, targets: Path
) -> StepVerdict:
    """The verdict of `answer` as step `index`'s code, the earlier steps carrying their reference code."""
    step = problem.steps[index]
    codes: dict[str, str | None] = {earlier.step_id: earlier.ground_truth_code for earlier in problem.steps[:index]}
    codes[step.step_id] = answer.code
    script = build_step_script(problem, index, codes, data_paths, DEFAULT_CARRY)
    job = job_for_script(script, limits=survey_limits(), targets_file=targets)
    return job if isinstance(job, StepVerdict) else run_request(StepRequest(job, None, ()))


@dataclass(frozen=True)
class Trial:
    problem: Problem
    index: int
    answer: TrivialAnswer

    @property
    def step(self) -> Step:
        return self.problem.steps[self.index]


def surveyed_steps(problems: Iterable[Problem]) -> list[tuple[Problem, int]]:
    """The scored steps with official tests and a function header."""
    return [
        (problem, index)
        for problem in problems
        for index, step in enumerate(problem.steps)
        if not step.prefilled and step.test_cases and defined_name(step.function_header)
    ]


def run_trials(
    trials: list[Trial],
    data_paths: DataPaths,
    targets: Path,
    workers: int,
    progress: Callable[[Trial, StepVerdict], None] = lambda trial, verdict: None,
) -> dict[Trial, StepVerdict]:
    def one(trial: Trial) -> tuple[Trial, StepVerdict]:
        verdict = score_answer(trial.problem, trial.index, trial.answer, data_paths, targets)
        progress(trial, verdict)
        return trial, verdict

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(pool.map(one, trials))


def reason_of(answers: list[TrivialAnswer], tests: int) -> str:
    """`an answer returning zeros of the output's shape passes all 3 official tests` (several joined by "or")."""
    which = " or ".join(answer.description for answer in answers)
    return f"an answer {which} passes all {tests} official test{'s' if tests != 1 else ''}"


def survey_record(
    steps: list[tuple[Problem, int]], verdicts: dict[Trial, StepVerdict], targets: Path, command: str
) -> dict[str, Any]:
    listed: dict[str, Any] = {}
    for problem, index in steps:
        step = problem.steps[index]
        passing = [t.answer for t, v in verdicts.items() if t.step.step_id == step.step_id and v.status == "pass"]
        if passing:
            listed[step.step_id] = {
                "passed_by": [answer.name for answer in passing],
                "tests": len(step.test_cases),
                "reason": reason_of(passing, len(step.test_cases)),
            }
    return {
        "about": (
            "Steps whose official tests accept plainly wrong code: a trivial answer (zeros of the output's shape, "
            "one input returned unchanged, a constant) passes every official test of the step against these "
            "targets. A pass on a listed step is flagged 'weak official test' in summary.md and report.html; the "
            "official verdict is unchanged. See scripts/weak_tests_survey.py for the trivial answers."
        ),
        "produced_by": command,
        "produced_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "targets": {"file": targets.name, "sha256": hashlib.sha256(targets.read_bytes()).hexdigest()},
        "environment": {"python": platform.python_version(), **package_versions(("numpy", "scipy", "sympy"))},
        "trivial_answers": {
            "zeros": "the reference output mapped to zeros of the same structure and type",
            "input:<parameter>": "the argument of that parameter, returned unchanged (each parameter in turn)",
            "constant:<value>": f"the constant returned ({', '.join(CONSTANTS)})",
        },
        "trials": len(verdicts),
        "surveyed": [problem.steps[index].step_id for problem, index in steps],
        "steps": listed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PRODUCED_BY, description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the scicode folder of the problem files")
    parser.add_argument("--targets", type=Path, default=None, help=f"targets file (default: <data>/{TARGETS_NAME})")
    parser.add_argument("--workers", type=int, default=2, help="test processes at once")
    parser.add_argument("--output", type=Path, default=WEAK_TESTS_FILE)
    options = parser.parse_args(argv)
    if options.data.resolve().name != "scicode":
        parser.error(f"--data must be a folder named scicode holding the problem files, not {options.data}")
    data_paths = DataPaths(options.data.resolve().parent)
    targets = (options.targets or options.data / TARGETS_NAME).resolve()
    steps = surveyed_steps(load_split(data_paths, "validation"))
    trials = [
        Trial(problem, index, answer) for problem, index in steps for answer in trivial_answers(problem.steps[index])
    ]
    print(f"{len(trials)} trivial answers of {len(steps)} steps, against {targets}", file=sys.stderr)

    def progress(trial: Trial, verdict: StepVerdict) -> None:
        print(f"{trial.step.step_id} {trial.answer.name}: {verdict.status}", file=sys.stderr)

    verdicts = run_trials(trials, data_paths, targets, options.workers, progress)
    record = survey_record(steps, verdicts, targets, f"{PRODUCED_BY} --data {options.data}")
    options.output.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"{len(record['steps'])} step(s) listed in {options.output}: {', '.join(record['steps'])}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
