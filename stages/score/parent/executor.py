"""Where a step's test process runs: one small interface, chosen in one place (`executor_for`).

The score stage turns every step that needs running into a `StepRequest` (the engine's `StepJob`
without its target values, the targets file's sha256 and the interpreter/library versions the
verdict cache key assumes, and the step's expected duration) and hands it to a `StepExecutor`:

* `local` (`executor=local`, the default): `LocalExecutor` reads the step's targets in this process
  and runs `engine.execute_step` here, holding one slot of the process-wide longest-first pool
  (`pool.shared_slots(score_workers)`). This path never imports dask.
* `dask` (`executor=dask`): `stages.score.parent.dask_executor.DaskExecutor` submits `run_request` to a
  Dask distributed cluster (`scheduler=tcp://host:port`, or a `distributed.LocalCluster` of
  `score_workers` processes started once per process); see that module.

Either way the executing side runs `request.run_request`: read the step's targets from `job.targets_file`
(a path that side can see), then the same `execute_step` (timeout, process group, memory limit,
scrubbed environment, kernel confinement; the targets go to the checker, never to the test process).
The verdict cache stays with the caller (the score stage).
"""

from __future__ import annotations

from stages.config.settings import Settings
from stages.execution.slots import PrioritySlots, shared_slots
from stages.progress.activity import ACTIVITY
from stages.records.verdict import StepVerdict
from stages.score.parent.engine import execute_step
from stages.score.parent.request import (
    ExecutorError,
    ExecutorName,
    StepExecutor,
    StepRequest,
    run_request,
    with_targets,
)

__all__ = [
    "ExecutorError",
    "ExecutorName",
    "LocalExecutor",
    "StepExecutor",
    "StepRequest",
    "executor_for",
    "run_request",
    "with_targets",
]


class LocalExecutor:
    """Test processes of this machine, at most `workers` at once across the whole process."""

    name: ExecutorName = "local"

    def __init__(self, workers: int) -> None:
        self.slots: PrioritySlots = shared_slots(workers)

    def run(self, request: StepRequest) -> StepVerdict:
        loaded = with_targets(request.job)  # read outside the slot: file I/O, no test process yet
        if isinstance(loaded, StepVerdict):
            return loaded
        with self.slots.slot(request.priority), ACTIVITY.busy("test_processes"):
            return execute_step(loaded)


def executor_for(settings: Settings) -> StepExecutor:
    """The executor of `settings.executor` (the one place where it is chosen); ExecutorError when unusable."""
    if settings.executor == "local":
        return LocalExecutor(settings.score_workers)
    if settings.executor == "dask":
        from stages.score.parent.dask_executor import dask_executor_for

        return dask_executor_for(settings.scheduler, settings.score_workers)
    raise ExecutorError(f"invalid executor={settings.executor}: expected one of local, dask")
