"""Where a step's test process runs: one small interface, chosen in one place (`executor_for`).

The score stage turns every step that needs running into a `StepRequest` (the engine's `StepJob`
without its target values, the targets file's sha256 and the interpreter/library versions the
verdict cache key assumes, and the step's expected duration) and hands it to a `StepExecutor`:

* `local` (`executor=local`, the default): `LocalExecutor` reads the step's targets in this process
  and runs `engine.execute_step` here, holding one slot of the process-wide longest-first pool
  (`pool.shared_slots(score_workers)`). This path never imports dask.
* `dask` (`executor=dask`): `stages.score.dask_executor.DaskExecutor` submits `run_request` to a
  Dask distributed cluster (`scheduler=tcp://host:port`, or a `distributed.LocalCluster` of
  `score_workers` processes started once per process); see that module.

Either way the executing side runs `run_request`: read the step's targets from `job.targets_file`
(a path that side can see), then the same `execute_step` (timeout, process group, memory limit,
scrubbed environment, kernel confinement; the targets go to the checker, never to the test process).
The verdict cache stays with the caller (the score stage).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from stages.activity import ACTIVITY
from stages.config import Settings
from stages.score.engine import StepJob, execute_step
from stages.score.pool import PrioritySlots, shared_slots
from stages.score.targets_io import TargetsUnavailable, load_step_targets
from stages.verdict import StepVerdict

ExecutorName = Literal["local", "dask"]


class ExecutorError(RuntimeError):
    """An executor cannot be used at all (dask missing, scheduler unreachable); one line."""


@dataclass(frozen=True)
class StepRequest:
    """One step to execute, as sent to the executing side (small: targets are read there)."""

    job: StepJob                               # target_pickles empty: read from job.targets_file where it runs
    targets_sha256: str | None                 # the targets file the verdict cache key assumes
    versions: tuple[tuple[str, str], ...]      # interpreter and library versions the verdict cache key assumes
    expected_seconds: float = 1.0              # last measured duration: longest steps start first

    @property
    def step_id(self) -> str:
        return self.job.step_id


class StepExecutor(Protocol):
    name: ExecutorName

    def run(self, request: StepRequest) -> StepVerdict:
        """Execute one step (blocking) and return its verdict; never raises for a step's own failure."""
        ...


def with_targets(job: StepJob) -> StepJob | StepVerdict:
    """The job with one target pickle per test, read from `job.targets_file`; an eval_error when unreadable.

    A job without a targets file runs as it is (tests that compare with no target; the score stage never
    sends one: its steps without targets are eval_error before any executor)."""
    if job.target_pickles or not job.tests or not job.targets_file:
        return job
    try:
        pickles = load_step_targets(Path(job.targets_file), job.step_id, len(job.tests), job.python_binary)
    except TargetsUnavailable as error:
        return StepVerdict(job.step_id, "eval_error", str(error), tests_total=len(job.tests))
    return dataclasses.replace(job, target_pickles=tuple(pickles))


def run_request(request: StepRequest) -> StepVerdict:
    """Read the targets and execute the step in this process (what every executor ends up running)."""
    loaded = with_targets(request.job)
    if isinstance(loaded, StepVerdict):
        return loaded
    return execute_step(loaded)


class LocalExecutor:
    """Test processes of this machine, at most `workers` at once across the whole process."""

    name: ExecutorName = "local"

    def __init__(self, workers: int) -> None:
        self.slots: PrioritySlots = shared_slots(workers)

    def run(self, request: StepRequest) -> StepVerdict:
        loaded = with_targets(request.job)  # read outside the slot: file I/O, no test process yet
        if isinstance(loaded, StepVerdict):
            return loaded
        with self.slots.slot(request.expected_seconds), ACTIVITY.busy("test_processes"):
            return execute_step(loaded)


def executor_for(settings: Settings) -> StepExecutor:
    """The executor of `settings.executor` (the one place where it is chosen); ExecutorError when unusable."""
    if settings.executor == "local":
        return LocalExecutor(settings.score_workers)
    if settings.executor == "dask":
        from stages.score.dask_executor import dask_executor_for

        return dask_executor_for(settings.scheduler, settings.score_workers)
    raise ExecutorError(f"invalid executor={settings.executor}: expected one of local, dask")
