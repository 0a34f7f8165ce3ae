"""Checks made before the first model call, each failing with one line (ConfigError).

- `check_before_download`: a replay file is read and validated once; `category`/`sample_ids` are checked
  against the problem files when they are already staged (else the select stage checks them after the download).
- `check_before_generation` (after select): the sandbox, when set, runs a probe snippet that imports numpy, scipy
  and sympy; every selected scorable step has targets, unless only generation was asked for or
  `allow_missing_targets=true`.
- `check_environment` (after select, before any generate or score task that will run something in
  `python_binary`): a probe snippet, run locally in `python_binary` under the snippet confinement, imports every
  module of the selected problems' `required_dependencies` and reports whether the seccomp filter was in force.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from stages.benchmark.problems import Problem, ProblemDataError
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
    raise ConfigError(
        f"{line}; stage the official {settings.benchmark.dataset.targets_file} in {settings.benchmark.folder}, set h5py_file=, "
        "select other problems, or set allow_missing_targets=true (no model was called)"
    )


def check_before_generation(settings: Settings, generation_only: bool) -> list[str]:
    """The checks after select and before any model call; the lines to print. ConfigError on the first failure."""
    from stages.select.stage import select_problems

    lines = [line for line in (check_sandbox(settings),) if line]
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


def probe_environment(settings: Settings, modules: tuple[str, ...]) -> JSONObject:
    """What `python_binary` imports as a local snippet does (same launcher, confinement and environment, without
    the execution_preamble); ConfigError when the probe itself cannot run."""
    from stages.generate.tools import run_local

    probe_settings = dataclasses.replace(
        settings,
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
            f"python_binary={settings.python_binary} cannot run a snippet under the snippet confinement "
            f"({outcome.status}): {detail} (no model was called)"
        )
    return report


def check_environment(settings: Settings, problems: tuple[Problem, ...]) -> str:
    """One line about `python_binary`'s environment; ConfigError naming every module it cannot import, or when the
    seccomp filter the confinement line promises was not in force."""
    from stages.execution.confinement import confinement_of

    modules = required_modules(problems)
    report = probe_environment(settings, modules)
    missing = report.get("missing")
    missing = missing if isinstance(missing, dict) else {}
    if missing:
        names = ", ".join(name for name in sorted(missing) if not any(name.startswith(f"{m}.") for m in missing))
        first = str(next(iter(missing.values())))
        raise ConfigError(
            f"python_binary={settings.python_binary} cannot import {names} under the snippet confinement "
            f"({first}): install them into that environment, or set python_binary= to an interpreter that has "
            "them (no model was called)"
        )
    expected = bool(confinement_of(settings.python_binary).get("seccomp"))
    filtered = report.get("seccomp") == 2
    if expected and not filtered:
        raise ConfigError(
            f"python_binary={settings.python_binary}: the seccomp filter the confinement probe found was not in force "
            "in a snippet (no model was called)"
        )
    return (
        f"environment ok: {settings.python_binary} imports the {len(modules)} modules of the selected problems' "
        f"required_dependencies under the snippet confinement (seccomp filter {'on' if filtered else 'off'})"
    )


def environment_will_be_used(settings: Settings, generation_only: bool) -> bool:
    """Whether this command runs anything in `python_binary`: scoring, or local tool snippets."""
    return not generation_only or (settings.mode == "tool_use" and not settings.sandbox_url)


def check_before_running(settings: Settings, generation_only: bool) -> list[str]:
    """The environment check, when this command will run something in `python_binary`; the lines to print."""
    from stages.select.stage import select_problems

    if not environment_will_be_used(settings, generation_only):
        return []
    return [check_environment(settings, select_problems(settings))]
