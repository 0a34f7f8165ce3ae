"""Checks made before the first model call, each failing with one line (ConfigError).

- `check_before_download`: a replay file is read and validated once; `category`/`sample_ids` are checked
  against the problem files when they are already staged (else the select stage checks them after the download).
- `check_before_generation` (after select): a replay file answers every selected scored step; the sandbox, when
  set, runs a probe snippet that imports numpy, scipy and sympy; every selected scorable step has targets, unless
  only generation was asked for or `allow_missing_targets=true`.
- `check_environment` (after select, before any generate or score task that will run something in
  `python_binary`): a probe snippet, run locally in `python_binary` under the snippet confinement, imports every
  module of the selected problems' `required_dependencies` and reports whether the seccomp filter was in force.
  Under `environments=`, scoring runs in each grading environment instead, and each is probed the same way (its
  line names the environment).
"""

from __future__ import annotations

import ast
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from stages.benchmark.problems import Problem, ProblemDataError
from stages.config.environments import Environment
from stages.config.settings import ConfigError, Settings
from stages.execution.safe_ast import parse_module
from stages.execution.untrusted import shown
from stages.storage.json_values import JSONObject
from stages.targets import ResolvedTargets, resolve_targets

SANDBOX_PROBE = "import numpy, scipy, sympy\nprint('probe', numpy.__version__, scipy.__version__, sympy.__version__)\n"
DERIVABLE_KINDS = frozenset({"derived", "missing"})  # validation targets can be derived from reference code


def problem_files_staged(settings: Settings) -> bool:
    return settings.benchmark.problems_staged()


PER_PROBLEM_TASKS: tuple[str, ...] = ("generate", "score")


def check_task_names(settings: Settings, task_names: list[str], selected: list[str]) -> None:
    """ConfigError for `generate:<id>` / `score:<id>` naming a problem that is not in the selection."""
    for name in task_names:
        stage, _, problem_id = name.partition(":")
        if stage in PER_PROBLEM_TASKS and problem_id and problem_id not in selected:
            listed = ", ".join(selected[:12]) + (", ..." if len(selected) > 12 else "")
            raise ConfigError(
                f"unknown task {name}: problem {problem_id} is not in the selection "
                f"(split={settings.split}, sample_ids={','.join(settings.sample_ids) or '(all)'}): {listed}"
            )


def check_before_download(settings: Settings, task_names: list[str]) -> None:
    """ConfigError for a bad replay file, or for category/sample_ids and per-problem task names when the problem
    files are already staged (else the select stage and the task creators check them after the download)."""
    from stages.generate import builtin

    if settings.model.startswith(builtin.REPLAY_PREFIX):
        builtin.load_replay(builtin.replay_file(settings.model))
    if problem_files_staged(settings):
        from stages.select.stage import select_problems

        try:
            selected = [problem.problem_id for problem in select_problems(settings)]
        except ProblemDataError:
            return  # unreadable files: the download stage repairs or reports them
        check_task_names(settings, task_names, selected)


def check_sandbox(settings: Settings) -> str | None:
    """One line about the sandbox's answer to the import probe; ConfigError when it cannot run it."""
    if not settings.sandbox_url:
        return None
    from stages.generate.tools import CODE_INTERPRETER, run_tool

    outcome = run_tool(CODE_INTERPRETER, json.dumps({"code": SANDBOX_PROBE}), settings)
    answer = outcome.output.strip().splitlines()[-1:] or [""]  # the execution_preamble may print before it
    if outcome.status != "ok" or not answer[0].startswith("probe "):
        raise ConfigError(
            f"sandbox_url={settings.sandbox_url} cannot run a snippet that imports numpy, scipy and sympy "
            f"({outcome.status}): {shown(outcome.output)}"
        )
    return f"sandbox ok: {shown(answer[0])}"  # what the sandbox printed is its text, shown neutralised


@dataclass(frozen=True)
class MissingTargets:
    steps: tuple[str, ...]
    scorable: int
    why: str


def steps_with_targets_in(path: Path, step_ids: list[str]) -> set[str]:
    import h5py

    try:
        with h5py.File(path, "r") as handle:
            return {step_id for step_id in step_ids if step_id in handle}
    except OSError as error:
        raise ConfigError(f"targets file {path} unreadable: {error}") from None


def _has_validation(settings: Settings) -> bool:
    """Whether the run's dataset has the validation split, whose targets can be derived from reference code."""
    return "validation" in settings.benchmark.dataset.splits


def _targets_missing_note(settings: Settings) -> str:
    dataset = settings.benchmark.dataset
    return (
        f"no {dataset.targets_file} in {settings.benchmark.folder} and no h5py_file=; "
        f"it is published in the {dataset.targets_published}"
    )


def missing_targets(settings: Settings, problems: tuple[Problem, ...], targets: ResolvedTargets) -> MissingTargets:
    """The selected scored steps that will have no targets to be scored against."""
    scorable = [step.step_id for problem in problems for step in problem.scored_steps]
    if targets.kind in ("official", "explicit") and targets.path is not None:
        present = steps_with_targets_in(targets.path, scorable)
        why = f"not in {targets.path.name}"
    elif targets.kind in DERIVABLE_KINDS and settings.explicit_targets_file() is None and not _has_validation(settings):
        present, why = set(), targets.note or _targets_missing_note(settings)
    elif targets.kind in DERIVABLE_KINDS and settings.explicit_targets_file() is None:
        derivable = {
            step.step_id
            for problem in problems
            if problem.split == "validation" and problem.has_reference_code
            for step in problem.scored_steps
        }
        present = derivable if targets.path is None else derivable & steps_with_targets_in(targets.path, scorable)
        why = "no official test_data.h5, and no reference code to derive targets from"
    else:
        present, why = set(), targets.note
    return MissingTargets(tuple(step for step in scorable if step not in present), len(scorable), why)


def check_targets(settings: Settings, problems: tuple[Problem, ...]) -> str:
    """One line on the targets of the selected steps; ConfigError when some are missing and not allowed."""
    missing = missing_targets(settings, problems, resolve_targets(settings))
    if not missing.steps:
        return f"targets ok: all {missing.scorable} scored steps have targets"
    listed = ", ".join(missing.steps[:8]) + (", ..." if len(missing.steps) > 8 else "")
    line = f"{len(missing.steps)} of {missing.scorable} scored steps have no targets ({missing.why}): {listed}"
    if settings.allow_missing_targets:
        return f"targets: {line}; they will count as unscored (allow_missing_targets=true)"
    raise ConfigError(f"{line}; {targets_advice(settings)} (no model was called)")


def targets_advice(settings: Settings) -> str:
    """What to do about missing targets: where the dataset's targets file comes from and how big it is, and the ways
    on without it (split=validation, whose targets are derived from the reference code, where the dataset has it)."""
    dataset = settings.benchmark.dataset
    validation = (
        "run split=validation (its targets are derived from the reference code), "
        if dataset.has_split("validation")
        else ""
    )
    return (
        f"stage the official {dataset.targets_file} ({dataset.targets_size}, from {dataset.targets_published}) in "
        f"{settings.benchmark.folder} or set h5py_file=<path to it>; without it, {validation}select other problems, "
        "or set allow_missing_targets=true to score the rest"
    )


LISTED_STEP_IDS = 8  # the step ids a refusal lists at most, with their count


def listed_ids(ids: list[str]) -> str:
    """At most LISTED_STEP_IDS of `ids` (neutralised: a replay file's keys are its author's text), and the count."""
    shown_ids = ", ".join(shown(step_id) for step_id in ids[:LISTED_STEP_IDS])
    return f"{len(ids)}: {shown_ids}{', ...' if len(ids) > LISTED_STEP_IDS else ''}" if ids else "0"


def check_replay_covers(settings: Settings, problems: tuple[Problem, ...]) -> str | None:
    """For `model=replay:<file>`: one line when the file answers every selected scored step; ConfigError naming
    the steps it lacks and the steps it holds (a step it lacks would be scored as the model's wrong answer)."""
    from stages.generate import builtin

    if not settings.model.startswith(builtin.REPLAY_PREFIX):
        return None
    path = builtin.replay_file(settings.model)
    answers = builtin.load_replay(path)
    scored = [step.step_id for problem in problems for step in problem.scored_steps]
    missing = [step_id for step_id in scored if step_id not in answers]
    if missing:
        raise ConfigError(
            f"invalid model=replay:{shown(str(path))}: no answer for {listed_ids(missing)} of the "
            f"{len(scored)} selected scored steps; it answers {listed_ids(sorted(answers, key=step_order))} "
            "(add their answers, or select its problems with sample_ids=; no model was called)"
        )
    return f"replay ok: {shown(str(path))} answers all {len(scored)} selected scored steps"


def step_order(step_id: str) -> tuple[bool, tuple[int, ...], str]:
    """ "10.2" before "10.10"; an id that is not numbers sorts last, by its text."""
    try:
        return False, tuple(int(part) for part in step_id.split(".")), ""
    except ValueError:
        return True, (), step_id


def check_before_generation(settings: Settings, generation_only: bool) -> list[str]:
    """The checks after select and before any model call; the lines to print. ConfigError on the first failure."""
    from stages.select.stage import select_problems

    replay = check_replay_covers(settings, select_problems(settings))
    lines = [line for line in (replay, check_sandbox(settings)) if line]
    if not generation_only:
        lines.append(check_targets(settings, select_problems(settings)))
    return lines


# ---------------------------------------------------------------------------
# The environment of python_binary, under the snippet confinement
# ---------------------------------------------------------------------------

ENVIRONMENT_PROBE_MARKER = "scicode-environment-probe "
ENVIRONMENT_PROBE_TIMEOUT_SECONDS = 120.0  # at least: importing scipy and sympy on a loaded machine takes seconds
ENVIRONMENT_PROBE = """\
import ctypes, importlib, json, sys
missing = {}
for name in MODULES:
    try:
        importlib.import_module(name)
    except BaseException as error:
        missing[name] = f"{type(error).__name__}: {error}"[:300]
seccomp = ctypes.CDLL(None, use_errno=True).prctl(21, 0, 0, 0, 0)  # PR_GET_SECCOMP: 2 under a filter
print(MARKER + json.dumps({"missing": missing, "seccomp": seccomp, "executable": sys.executable}))
"""


def required_modules(problems: tuple[Problem, ...]) -> tuple[str, ...]:
    """Every module the selected problems' `required_dependencies` import (`import a.b`, `from a.b import c`: a.b)."""
    modules: set[str] = set()
    for problem in problems:
        try:
            tree = parse_module(problem.required_dependencies or "")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # scored as it is: the test process reports its own failure
        for statement in ast.walk(tree):
            if isinstance(statement, ast.Import):
                modules.update(alias.name for alias in statement.names)
            elif isinstance(statement, ast.ImportFrom) and statement.module and not statement.level:
                modules.add(statement.module)
    return tuple(sorted(modules))


def environment_probe_code(modules: tuple[str, ...]) -> str:
    return f"MODULES = {list(modules)!r}\nMARKER = {ENVIRONMENT_PROBE_MARKER!r}\n" + ENVIRONMENT_PROBE


@dataclass(frozen=True)
class Interpreter:
    """An interpreter the preflight probes: its path, how its lines name it, and what to do when it lacks a module."""

    python: str
    label: str  # `python_binary=/x` or `environment 2024-era (/x)`
    remedy: str  # what to do when it cannot import a module

    @classmethod
    def of_python_binary(cls, settings: Settings) -> Interpreter:
        remedy = "install them into that environment, or set python_binary= to an interpreter that has them"
        return cls(settings.python_binary, f"python_binary={settings.python_binary}", remedy)

    @classmethod
    def of_environment(cls, environment: Environment) -> Interpreter:
        remedy = "install them into that environment, or name an interpreter that has them in environments="
        return cls(environment.python, f"environment {environment.name} ({environment.python})", remedy)


def probe_environment(
    settings: Settings, modules: tuple[str, ...], interpreter: Interpreter | None = None
) -> JSONObject:
    """What the interpreter (default `python_binary`) imports as a local snippet does (same launcher, confinement and
    environment, without the execution_preamble); ConfigError when the probe itself cannot run."""
    from stages.generate.tools import run_local

    interpreter = interpreter or Interpreter.of_python_binary(settings)
    probe_settings = dataclasses.replace(
        settings,
        python_binary=interpreter.python,
        execution_preamble="",
        code_timeout_seconds=max(settings.code_timeout_seconds, ENVIRONMENT_PROBE_TIMEOUT_SECONDS),
    )
    outcome = run_local(environment_probe_code(modules), probe_settings)
    lines = [line for line in outcome.output.splitlines() if line.startswith(ENVIRONMENT_PROBE_MARKER)]
    try:
        report = json.loads(lines[-1][len(ENVIRONMENT_PROBE_MARKER) :]) if lines else None
    except ValueError:
        report = None
    if outcome.status != "ok" or not isinstance(report, dict):
        detail = " ".join(outcome.output.split())[:300]
        raise ConfigError(
            f"{interpreter.label} cannot run a snippet under the snippet confinement "
            f"({outcome.status}): {detail} (no model was called)"
        )
    return report


def check_environment(settings: Settings, problems: tuple[Problem, ...], interpreter: Interpreter | None = None) -> str:
    """One line about an interpreter's environment (default `python_binary`); ConfigError naming every module it
    cannot import, or when the seccomp filter the confinement line promises was not in force."""
    from stages.execution.confinement import confinement_of

    interpreter = interpreter or Interpreter.of_python_binary(settings)
    modules = required_modules(problems)
    report = probe_environment(settings, modules, interpreter)
    missing = report.get("missing")
    missing = missing if isinstance(missing, dict) else {}
    if missing:
        names = ", ".join(name for name in sorted(missing) if not any(name.startswith(f"{m}.") for m in missing))
        first = str(next(iter(missing.values())))
        raise ConfigError(
            f"{interpreter.label} cannot import {names} under the snippet confinement ({first}): "
            f"{interpreter.remedy} (no model was called)"
        )
    expected = bool(confinement_of(interpreter.python).get("seccomp"))
    filtered = report.get("seccomp") == 2
    if expected and not filtered:
        raise ConfigError(
            f"{interpreter.label}: the seccomp filter the confinement probe found was not in force "
            "in a snippet (no model was called)"
        )
    return (
        f"environment ok: {interpreter.label if interpreter.label.startswith('environment ') else interpreter.python} "
        f"imports the {len(modules)} modules of the selected problems' "
        f"required_dependencies under the snippet confinement (seccomp filter {'on' if filtered else 'off'})"
    )


def interpreters_to_check(settings: Settings, generation_only: bool) -> list[Interpreter]:
    """The interpreters this command runs something in: `python_binary` for local tool snippets and for scoring
    without `environments=`; each grading environment when scoring with it."""
    scoring = not generation_only
    snippets = settings.mode == "tool_use" and not settings.sandbox_url
    named = settings.grading_environments
    found = [Interpreter.of_python_binary(settings)] if snippets or (scoring and not named) else []
    return found + ([Interpreter.of_environment(environment) for environment in named] if scoring else [])


def environment_will_be_used(settings: Settings, generation_only: bool) -> bool:
    """Whether this command runs anything locally: scoring, or local tool snippets."""
    return bool(interpreters_to_check(settings, generation_only))


def check_before_running(settings: Settings, generation_only: bool) -> list[str]:
    """The environment check of every interpreter this command will run something in; the lines to print."""
    from stages.select.stage import select_problems

    interpreters = interpreters_to_check(settings, generation_only)
    if not interpreters:
        return []
    problems = select_problems(settings)
    return [check_environment(settings, problems, interpreter) for interpreter in interpreters]
