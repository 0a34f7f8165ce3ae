"""Scoring on a Dask distributed cluster (`executor=dask`): the same isolated step execution, on workers.

    pip install -e '.[dask]'
    doit run executor=dask                                  # a LocalCluster of score_workers processes
    doit run executor=dask scheduler=tcp://host:8786        # an existing cluster

`DaskExecutor.run(request)` submits `run_on_worker` with `client.submit(..., key=<unique>, pure=False,
priority=<integer step priority>)`, so queued steps start in the local executor's order, and
waits for the verdict. On the worker, `run_on_worker` runs exactly what the local executor runs
(`request.run_request`: read the step's targets from `job.targets_file`, then `engine.execute_step`
with its timeout, memory limit, scrubbed environment and kernel confinement of the test process; the
targets go to the checker process only, so the code under test never gets the targets file or the
target values). The verdict cache stays on the submitting side.

Requirements of a remote cluster (`scheduler=`): every worker must
* see the targets file at the same absolute path as the submitting machine (the job carries the
  path, not the data): put `data_dir` on a shared filesystem mounted at the same place, or give
  `h5py_file=` an absolute path that exists everywhere. A worker that cannot read it, or reads a
  file with another sha256, returns an `eval_error` naming the worker (never a silent fail);
* have this project installed (`stages` importable) and `python_binary` at the same path, with the
  same interpreter and library versions as the submitting side (the verdict cache key records them;
  a worker with other versions returns an `eval_error` naming the first difference).

Without `scheduler=`, a `distributed.LocalCluster` (processes, `n_workers=score_workers`,
`threads_per_worker=1`, on 127.0.0.1 with random ports and no dashboard, no Dask memory manager:
each test process has its own `step_memory_mb` limit) is started on first use, once per process and per worker count, and closed
at exit; its scheduler runs with `allowed-failures=0`, so a worker lost mid-step raises
`KilledWorker` at once and the step is resubmitted (once) to another worker by this module. A
remote scheduler may instead re-run such a step by itself (its `allowed-failures`); each start of a
step is announced as an event on the topic `scicode-step-start`, so either way a step that ran more
than once records "retried after worker loss" in its verdict's reason, naming the lost worker(s).
A step whose worker is lost twice is an `eval_error` (never cached).
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib.util
import logging
import threading
import uuid
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

from stages.execution.scheduling import integer_priority
from stages.records.verdict import StepVerdict
from stages.score.checker.verdict_rules import (
    not_submitted,
    retried_after_worker_loss,
    worker_failed,
    worker_unfit,
    workers_lost,
)
from stages.score.parent.request import ExecutorError, ExecutorName, StepRequest, run_request
from stages.storage.artifacts import sha256_file

START_TOPIC = "scicode-step-start"
WORKER_LOSS_RESUBMITS = 1
CONNECT_TIMEOUT = "20s"
CLOSE_TIMEOUT_SECONDS = 20
KEY_PREFIX = "scicode-step"
MISSING_MESSAGE = (
    "executor=dask needs the optional dask extra: pip install -e '.[dask]' (module {name} is not installed)"
)


# ---------------------------------------------------------------------------
# The optional dependency
# ---------------------------------------------------------------------------


def missing_dependency() -> str | None:
    """The one-line reason executor=dask cannot work here (dask or distributed not installed), else None."""
    for name in ("dask", "distributed"):
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            found = None
        if found is None:
            return MISSING_MESSAGE.format(name=name)
    return None


def require_distributed() -> ModuleType:
    """`import distributed`, or ExecutorError with the one-line install hint."""
    reason = missing_dependency()
    if reason is not None:
        raise ExecutorError(reason)
    try:
        import distributed
    except ImportError as error:
        raise ExecutorError(MISSING_MESSAGE.format(name=f"distributed ({error})")) from None
    return distributed


# ---------------------------------------------------------------------------
# Worker side
# ---------------------------------------------------------------------------


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return "(not on a dask worker)"


def _announce_start(key: str, worker: str) -> None:
    """Tell the submitting client this step started here (it counts starts to detect re-runs)."""
    try:
        from distributed import get_worker

        get_worker().log_event(START_TOPIC, {"key": key, "worker": worker})
    except Exception:  # noqa: BLE001 - an announcement must never fail the step
        pass


@lru_cache(maxsize=8)
def _sha256_of(path: str, size: int, mtime_ns: int) -> str:
    return sha256_file(Path(path))


def _targets_problem(request: StepRequest) -> str | None:
    job = request.job
    if not job.tests or not job.targets_file:
        return None
    path = Path(job.targets_file)
    try:
        stat = path.stat()
    except OSError:
        return (
            f"targets file {path} not found on this worker: with a remote scheduler, data_dir (the targets "
            f"file) must be visible on every worker at the same path"
        )
    if request.targets_sha256 is None:
        return None
    found = _sha256_of(str(path), stat.st_size, stat.st_mtime_ns)
    if found != request.targets_sha256:
        return (
            f"targets file {path} on this worker differs from the submitting side's "
            f"(sha256 {found[:12]} vs {request.targets_sha256[:12]})"
        )
    return None


def _versions_problem(request: StepRequest) -> str | None:
    from stages.score.parent.launcher import LaunchError, environment_versions

    expected = dict(request.versions)
    try:
        here = environment_versions(request.job.limits.python_binary)
    except LaunchError as error:
        return f"cannot run python_binary={request.job.limits.python_binary}: {error}"
    different = sorted(name for name in expected.keys() | here.keys() if expected.get(name) != here.get(name))
    if not different:
        return None
    name = different[0]
    return (
        f"{name} {here.get(name, 'absent')} here but {expected.get(name, 'absent')} on the submitting side "
        f"(verdicts would not be comparable)"
    )


def run_on_worker(request: StepRequest, key: str) -> StepVerdict:
    """What a dask worker runs for one step: checks of its environment, then `request.run_request`."""
    worker = _worker_address()
    _announce_start(key, worker)
    problem = _targets_problem(request) or _versions_problem(request)
    if problem is not None:
        return worker_unfit(request.step_id, len(request.job.tests), worker, problem)
    return dataclasses.replace(run_request(request), executed_on=worker)


# ---------------------------------------------------------------------------
# Submitting side
# ---------------------------------------------------------------------------


class DaskExecutor:
    """Steps executed on a Dask cluster: an existing scheduler, or a LocalCluster this object owns."""

    name: ExecutorName = "dask"

    def __init__(self, scheduler: str = "", workers: int = 1) -> None:
        distributed = require_distributed()
        self.scheduler = scheduler
        self.cluster: Any = None
        self._starts: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        if scheduler:
            self.client = self._connect(distributed, scheduler)
        else:
            self.cluster = self._local_cluster(distributed, workers)
            self.client = distributed.Client(self.cluster, set_as_default=False)
        self.client.subscribe_topic(START_TOPIC, self._on_start)

    @staticmethod
    def _connect(distributed: ModuleType, scheduler: str) -> Any:
        try:
            return distributed.Client(scheduler, timeout=CONNECT_TIMEOUT, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as error:
            raise ExecutorError(f"cannot connect to the dask scheduler {scheduler}: {error}") from None

    @staticmethod
    def _local_cluster(distributed: ModuleType, workers: int) -> Any:
        import dask

        try:
            with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
                return distributed.LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                    scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                    memory_limit=0,
                    silence_logs=logging.CRITICAL,
                )
        except Exception as error:  # noqa: BLE001 - any start failure becomes one line
            raise ExecutorError(
                f"cannot start a dask LocalCluster of {workers} workers: {type(error).__name__}: {error}"
            ) from None

    def _on_start(self, event: Any) -> None:
        _, message = event
        if isinstance(message, dict) and "key" in message:
            with self._lock:
                self._starts.setdefault(str(message["key"]), []).append(str(message.get("worker", "?")))

    def _pop_starts(self, key: str) -> list[str]:
        with self._lock:
            return self._starts.pop(key, [])

    def worker_addresses(self) -> list[str]:
        return sorted(self.client.scheduler_info()["workers"])

    def _submit(self, request: StepRequest) -> tuple[str, Any]:
        key = f"{KEY_PREFIX}-{request.step_id}-{uuid.uuid4().hex[:16]}"
        future = self.client.submit(
            run_on_worker, request, key, key=key, pure=False, priority=integer_priority(request.priority)
        )
        return key, future

    def run(self, request: StepRequest) -> StepVerdict:
        from distributed import KilledWorker

        lost: list[str] = []
        for _ in range(1 + WORKER_LOSS_RESUBMITS):
            try:
                key, future = self._submit(request)
            except Exception as error:  # noqa: BLE001 - a closed client, a lost scheduler
                return not_submitted(request.step_id, len(request.job.tests), str(error))
            try:
                verdict: StepVerdict = future.result()  # run_on_worker's
            except KilledWorker as error:
                starts = self._pop_starts(key)
                last = getattr(getattr(error, "last_worker", None), "address", None)
                lost.extend(starts or ([str(last)] if last else ["(unknown)"]))
                continue
            except Exception as error:  # noqa: BLE001 - a worker-side exception, a lost scheduler
                self._pop_starts(key)
                return worker_failed(request.step_id, len(request.job.tests), error)
            finally:
                future.release()
            starts = self._pop_starts(key)
            lost.extend(starts[:-1])  # a scheduler that re-ran the step itself announced every start
            if lost:
                verdict = retried_after_worker_loss(verdict, lost, starts[-1] if starts else None)
            return verdict
        return workers_lost(request.step_id, len(request.job.tests), lost)

    def close(self) -> None:
        for closable in (self.client, self.cluster):
            if closable is None:
                continue
            try:
                closable.close(timeout=CLOSE_TIMEOUT_SECONDS)
            except Exception:  # noqa: BLE001 - best effort at exit
                pass


# ---------------------------------------------------------------------------
# One executor per process (and scheduler / worker count), closed at exit
# ---------------------------------------------------------------------------

_EXECUTORS: dict[tuple[str, int], DaskExecutor] = {}
_FAILURES: dict[tuple[str, int], ExecutorError] = {}
_EXECUTORS_LOCK = threading.Lock()
_ATEXIT_REGISTERED = False


def dask_executor_for(scheduler: str, workers: int) -> DaskExecutor:
    """The process-wide executor of `scheduler` (or of a LocalCluster of `workers`), created on first use.

    A failure to connect or start is remembered: every later call raises the same one-line error at once
    (doit's score tasks must not each wait for an unreachable scheduler)."""
    global _ATEXIT_REGISTERED
    key = (scheduler, 0 if scheduler else workers)
    with _EXECUTORS_LOCK:
        if key in _FAILURES:
            raise _FAILURES[key]
        executor = _EXECUTORS.get(key)
        if executor is None:
            try:
                executor = _EXECUTORS[key] = DaskExecutor(scheduler, workers)
            except ExecutorError as error:
                _FAILURES[key] = error
                raise
            if not _ATEXIT_REGISTERED:
                atexit.register(close_dask_executors)
                _ATEXIT_REGISTERED = True
        return executor


def close_dask_executors() -> None:
    """Close every executor this process created (clients first, then their LocalClusters)."""
    with _EXECUTORS_LOCK:
        executors = list(_EXECUTORS.values())
        _EXECUTORS.clear()
    for executor in executors:
        executor.close()
