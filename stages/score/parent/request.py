"""What an executor is given and what every executing side runs, shared by `executor.py` (which chooses an
executor and holds the local one) and `dask_executor.py` (which runs `run_request` on Dask workers).

A `StepRequest` is the engine's `StepJob` (built from a step script by `job_for_script`) without its target
values, plus what the verdict cache key assumes; `run_request` reads the step's targets from `job.targets_file` where it runs, then executes the
step (`engine.execute_step`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from stages.execution.scheduling import StepPriority, step_priority
from stages.records.verdict import StepVerdict
from stages.score.checker.rewrite import RewriteError, imported_modules, rewrite_tests
from stages.score.checker.verdict_rules import targets_unreadable, unprepared_tests
from stages.score.parent.engine import StepJob, execute_step
from stages.score.parent.limits import StepLimits
from stages.score.parent.script import StepScript
from stages.score.parent.targets_io import TargetsUnavailable, load_step_targets

ExecutorName = Literal["local", "dask"]


class ExecutorError(RuntimeError):
    """An executor cannot be used at all (dask missing, scheduler unreachable); one line."""


@dataclass(frozen=True)
class StepRequest:
    """One step to execute, as sent to the executing side (small: targets are read there)."""

    job: StepJob  # target_pickles empty: read from job.targets_file where it runs
    targets_sha256: str | None  # the targets file the verdict cache key assumes
    versions: tuple[tuple[str, str], ...]  # interpreter and library versions the verdict cache key assumes
    expected_seconds: float = 1.0  # last measured duration (else pinned, else a default)
    problem_seconds: float = 1.0  # expected_seconds of its problem's slowest step

    @property
    def priority(self) -> StepPriority:
        return step_priority(self.problem_seconds, self.expected_seconds)

    @property
    def step_id(self) -> str:
        return self.job.step_id


class StepExecutor(Protocol):
    name: ExecutorName

    def run(self, request: StepRequest) -> StepVerdict:
        """Execute one step (blocking) and return its verdict; never raises for a step's own failure."""
        ...


def job_for_script(
    script: StepScript,
    *,
    limits: StepLimits,
    targets_file: Path,
) -> StepVerdict | StepJob:
    """The engine's job for a step script, without target values (read from `targets_file` where it runs); an
    eval_error verdict when the official tests cannot be prepared."""
    try:
        tests = rewrite_tests(script.tests, script.deps)
    except RewriteError as error:
        return unprepared_tests(script.step_id, len(script.tests), str(error))
    return StepJob(
        problem_id=script.problem_id,
        step_id=script.step_id,
        deps=script.deps,
        sections=tuple((section.label, section.code) for section in script.sections),
        tests=tests,
        modules=imported_modules([script.deps, *script.tests]),
        target_pickles=(),
        limits=limits,
        targets_file=str(targets_file.resolve()),
    )


def with_targets(job: StepJob) -> StepJob | StepVerdict:
    """The job with one target pickle per test, read from `job.targets_file`; an eval_error when unreadable.

    A job without a targets file runs as it is (tests that compare with no target; the score stage never
    sends one: its steps without targets are eval_error before any executor)."""
    if job.target_pickles or not job.tests or not job.targets_file:
        return job
    try:
        pickles = load_step_targets(Path(job.targets_file), job.step_id, len(job.tests), job.limits.python_binary)
    except TargetsUnavailable as error:
        return targets_unreadable(job.step_id, len(job.tests), str(error))
    return dataclasses.replace(job, target_pickles=tuple(pickles))


def run_request(request: StepRequest) -> StepVerdict:
    """Read the targets and execute the step in this process (what every executor ends up running)."""
    loaded = with_targets(request.job)
    if isinstance(loaded, StepVerdict):
        return loaded
    return execute_step(loaded)
