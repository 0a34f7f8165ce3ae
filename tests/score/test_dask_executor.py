"""Scoring on Dask distributed: real `distributed.LocalCluster`s of worker processes on this machine.

The same verdicts as the local executor for the 50 validation reference steps; a worker killed in the
middle of a step (the step is re-run on another worker and the verdict says so, whether this module or
the scheduler resubmits it); a timeout on a worker (its process group is killed); worker-side checks
of the targets file and library versions; `doit run executor=dask` against the local executor; and
the local executor never importing dask.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

# The test extra includes the dask extra: a missing `distributed` fails this module, it never skips it.
import distributed
import pytest

from stages.records.verdict import StepVerdict
from stages.score.parent.dask_executor import DaskExecutor, require_distributed
from stages.score.parent.engine import StepJob
from stages.score.parent.executor import ExecutorError, StepRequest
from stages.score.parent.launcher import environment_versions
from stages.score.parent.stage import reference_seconds
from tests.score.score_helpers import make_job, problem
from tests.support.pipeline_support import ReferenceScoring
from tests.support.process_scan import assert_no_process_with, runs_a_step, unique_sleep_seconds
from tests.support.run_files import summary_file

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TESTS_SCORE = Path(__file__).resolve().parent
DEAD_URL = "http://127.0.0.1:9/scicode.zip"
VERSIONS = tuple(sorted(environment_versions(sys.executable).items()))


def sleeper_deps(marker: str) -> str:
    return f"import numpy as np\nimport subprocess\n_sleeper = subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"


def request_for(job: StepJob, *, expected: float = 1.0, **changes: Any) -> StepRequest:
    """What the score stage sends: the job without target values (the executing side reads them)."""
    return StepRequest(dataclasses.replace(job, target_pickles=()), None, VERSIONS, expected, **changes)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster_executor() -> Iterator[DaskExecutor]:
    """A DaskExecutor owning a LocalCluster of 2 worker processes (what `executor=dask` starts)."""
    executor = DaskExecutor("", 2)
    try:
        yield executor
    finally:
        executor.close()


# ---------------------------------------------------------------------------
# The optional dependency
# ---------------------------------------------------------------------------


def test_local_scoring_never_imports_dask(staged_data_dir: Path, shared_scicode: Path, tmp_path: Path) -> None:
    program = f"""
import json, sys
from pathlib import Path
sys.path.insert(0, {str(TESTS_SCORE)!r})
import stages.score.parent.stage as stage
from score_helpers import reference_codes, write_generation
from stages.config.settings import load_settings
from stages.benchmark.problems import problems_by_id
settings = load_settings({{"data_dir": {str(staged_data_dir)!r}, "results_dir": "results", "score_workers": "2"}},
                         cwd=Path.cwd())
prob = problems_by_id(settings.data_paths)["19"]
write_generation(settings, prob, reference_codes(prob))
targets = stage.ResolvedTargets("explicit", Path({str(shared_scicode / "test_data_dev.h5")!r}), None, "dev")
summary = stage.run_score(settings, "19", targets)
print(json.dumps({{"summary": summary, "loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("dask", "distributed"))}}))
"""
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["summary"]["passed"] == 2
    assert outcome["loaded"] == []


def test_missing_distributed_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # what `import distributed` sees when not installed
    with pytest.raises(ExecutorError) as raised:
        require_distributed()
    assert str(raised.value) == (
        "executor=dask needs the optional dask extra: pip install -e '.[dask]' (module distributed is not installed)"
    )


def test_doit_with_executor_dask_without_distributed_stops_before_any_work(
    tmp_path: Path, staged_data_dir: Path
) -> None:
    argv = [
        "doit",
        "-f",
        str(PROJECT_ROOT / "dodo.py"),
        "-d",
        str(tmp_path),
        "select",
        f"data_dir={staged_data_dir}",
        f"dataset_zip_url={DEAD_URL}",
        "executor=dask",
    ]
    program = (
        f"import runpy, sys\nsys.modules['distributed'] = None\nsys.argv = {argv!r}\n"
        "runpy.run_module('doit', run_name='__main__')\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stderr.strip() == (
        "scicode: config error: executor=dask needs the optional dask extra: "
        "pip install -e '.[dask]' (module distributed is not installed)"
    )
    assert not (staged_data_dir / "scicode" / "manifest.json").exists()


# ---------------------------------------------------------------------------
# Same verdicts as the local executor
# ---------------------------------------------------------------------------


def validation_reference_jobs(shared_scicode: Path) -> list[StepJob]:
    from stages.benchmark.problems import load_split
    from tests.score.score_helpers import shared_data_paths

    return [
        make_job(shared_scicode, prob, step.step_id, timeout=900)
        for prob in load_split(shared_data_paths(shared_scicode), "validation")
        for step in prob.steps
        if not step.prefilled
    ]


def run_all(run: Callable[[StepRequest], StepVerdict], jobs: list[StepJob]) -> tuple[dict[str, StepVerdict], float]:
    """Every job at once, ordered as the score stage orders them (each with its problem's slowest step)."""
    expected = {job.step_id: reference_seconds().get(job.step_id, 1.0) for job in jobs}
    slowest: dict[str, float] = {}
    for job in jobs:
        slowest[job.problem_id] = max(slowest.get(job.problem_id, 0.0), expected[job.step_id])
    requests = [
        request_for(job, expected=expected[job.step_id], problem_seconds=slowest[job.problem_id]) for job in jobs
    ]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        verdicts = list(pool.map(run, requests))
    return {verdict.step_id: verdict for verdict in verdicts}, time.monotonic() - started


def essentials(verdict: StepVerdict) -> tuple:
    return verdict.status, verdict.reason, verdict.tests_total, verdict.tests_passed, verdict.returncode


def local_reference_verdicts(scoring: ReferenceScoring) -> dict[str, StepVerdict]:
    """The verdicts `run_score` wrote for the reference steps with the local executor (carry=full, as `make_job`),
    read back by the details record (where each step ran included)."""
    from stages.benchmark.problems import load_split
    from stages.records.details import read_details_file

    verdicts: dict[str, StepVerdict] = {}
    for prob in load_split(scoring.settings.data_paths, "validation"):
        details = read_details_file(scoring.settings.run_paths.details(prob.problem_id))
        assert details is not None
        verdicts |= {v.step_id: v for v in details.attempts[0].evaluation.steps if v.status != "skipped"}
    return verdicts


@pytest.mark.slow
def test_validation_reference_steps_same_verdicts_as_local(
    shared_scicode: Path,
    cluster_executor: DaskExecutor,
    validation_reference_scoring: Callable[[str], ReferenceScoring],
) -> None:
    jobs = validation_reference_jobs(shared_scicode)
    assert len(jobs) == 50
    on_dask, dask_wall = run_all(cluster_executor.run, jobs)
    local = local_reference_verdicts(validation_reference_scoring("full"))
    print(f"50 reference steps: dask (LocalCluster, 2 workers) {dask_wall:.1f} s")
    assert {sid: essentials(v) for sid, v in on_dask.items()} == {sid: essentials(v) for sid, v in local.items()}
    assert all(verdict.status == "pass" for verdict in on_dask.values())
    workers = set(cluster_executor.worker_addresses())
    assert {verdict.executed_on for verdict in on_dask.values()} <= workers
    assert all(not verdict.executed_on for verdict in local.values())


# ---------------------------------------------------------------------------
# Worker loss, timeouts, worker-side checks
# ---------------------------------------------------------------------------


def sleeping_step(shared_scicode: Path, seconds: float) -> StepRequest:
    """Step 19.1 with its reference code, which first sleeps."""
    prob = problem(shared_scicode, "19")
    code = f"{prob.steps[0].ground_truth_code}\n__import__('time').sleep({seconds})\n"
    return request_for(make_job(shared_scicode, prob, "19.1", {"19.1": code}, timeout=120))


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().split(")")[-1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def step_processes(worker_pid: int) -> list[int]:
    """The test processes forked by the zygote(s) a worker process started: the zygote's children whose own child
    (the confined test process) runs in a step's scratch; the step's checker has no child, a spare has no step."""
    zygotes = [child for child in children(worker_pid) if b"zygote.py" in Path(f"/proc/{child}/cmdline").read_bytes()]
    return [
        pid for zygote in zygotes for pid in children(zygote) if alive(pid) and any(map(runs_a_step, children(pid)))
    ]


def kill_worker_during_step(executor: DaskExecutor, request: StepRequest) -> tuple[StepVerdict, str, int]:
    """Run `request`, SIGKILL the worker process running it once its test process started; the verdict, the
    killed worker's address and the pid of the test process it had started."""
    pids = executor.client.run(os.getpid)
    holder: dict[str, StepVerdict] = {}
    runner = threading.Thread(target=lambda: holder.setdefault("verdict", executor.run(request)))
    runner.start()
    busy: list[tuple[str, int]] = []

    def started() -> bool:
        busy[:] = [(address, test) for address, pid in pids.items() for test in step_processes(pid)]
        return bool(busy)

    wait_until(started, 60, "the test process to start")
    assert len(busy) == 1, busy
    address, test_process = busy[0]
    time.sleep(0.5)
    os.kill(pids[address], signal.SIGKILL)
    runner.join(180)
    assert "verdict" in holder, "the step never finished after its worker was killed"
    return holder["verdict"], address, test_process


@pytest.mark.slow
def test_worker_killed_mid_step_is_resubmitted_and_recorded(
    shared_scicode: Path, cluster_executor: DaskExecutor
) -> None:
    verdict, killed, orphan = kill_worker_during_step(cluster_executor, sleeping_step(shared_scicode, 4))
    assert verdict.status == "pass", verdict.reason
    assert f"retried after worker loss (dask worker {killed} died during the step; re-run on " in verdict.reason
    assert verdict.executed_on and verdict.executed_on != killed
    assert not alive(orphan), "the lost worker's test process outlived it"
    cluster_executor.client.wait_for_workers(2, timeout=60)  # the nanny restarts the killed worker


@pytest.mark.slow
def test_scheduler_rerun_after_worker_loss_is_recorded(shared_scicode: Path) -> None:
    """An existing cluster (`scheduler=tcp://...`) whose scheduler re-runs a lost step by itself."""
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        memory_limit=0,
        silence_logs=50,
    ) as cluster:
        executor = DaskExecutor(cluster.scheduler_address)
        try:
            verdict, killed, orphan = kill_worker_during_step(executor, sleeping_step(shared_scicode, 4))
            assert verdict.status == "pass", verdict.reason
            assert f"retried after worker loss (dask worker {killed} died during the step; re-run on " in verdict.reason
            assert not alive(orphan), "the lost worker's test process outlived it"
        finally:
            executor.close()


def test_timeout_on_a_worker_kills_every_descendant(shared_scicode: Path, cluster_executor: DaskExecutor) -> None:
    prob = problem(shared_scicode, "19")
    marker = unique_sleep_seconds()
    job = make_job(
        shared_scicode,
        prob,
        "19.1",
        {"19.1": "def tensor(*args):\n    while True:\n        pass\n"},
        timeout=3,
        deps=sleeper_deps(marker),
    )
    started = time.monotonic()
    verdict = cluster_executor.run(request_for(job))
    assert verdict.status == "timeout", verdict.reason
    assert "step_timeout_seconds=3 (process group killed)" in verdict.reason
    assert time.monotonic() - started < 30
    assert verdict.executed_on in cluster_executor.worker_addresses()
    assert_no_process_with(marker)


def test_worker_side_checks_are_eval_errors(
    shared_scicode: Path, cluster_executor: DaskExecutor, tmp_path: Path
) -> None:
    prob = problem(shared_scicode, "19")
    job = make_job(shared_scicode, prob, "19.1")
    elsewhere = dataclasses.replace(job, targets_file=str(tmp_path / "not-mounted" / "test_data.h5"))
    missing = cluster_executor.run(request_for(elsewhere))
    assert missing.status == "eval_error"
    assert missing.reason.startswith(f"on dask worker {missing.executed_on}: targets file ")
    assert "must be visible on every worker at the same path" in missing.reason

    stale = cluster_executor.run(dataclasses.replace(request_for(job), targets_sha256="0" * 64))
    assert stale.status == "eval_error" and "differs from the submitting side's (sha256" in stale.reason

    versions = tuple(sorted({**dict(VERSIONS), "numpy": "0.0.1"}.items()))
    older = cluster_executor.run(dataclasses.replace(request_for(job), versions=versions))
    assert older.status == "eval_error"
    assert "numpy" in older.reason and "0.0.1 on the submitting side (verdicts would not be comparable)" in older.reason

    from stages.storage.artifacts import sha256_file

    right = cluster_executor.run(
        dataclasses.replace(request_for(job), targets_sha256=sha256_file(shared_scicode / "test_data_dev.h5"))
    )
    assert right.status == "pass", right.reason


# ---------------------------------------------------------------------------
# doit run executor=dask
# ---------------------------------------------------------------------------

SUMMARY_NUMBERS = (
    "main_problem_resolved",
    "main_problem_total",
    "subproblem_correct",
    "subproblem_total",
    "Total",
    "Error",
    "status_counts",
    "failed_problems",
)


def gold_run(workdir: Path, data_dir: Path, targets: Path, *extra: str) -> Path:
    command = [
        sys.executable,
        "-m",
        "doit",
        "-f",
        str(PROJECT_ROOT / "dodo.py"),
        "-d",
        str(workdir),
        f"data_dir={data_dir}",
        f"dataset_zip_url={DEAD_URL}",
        f"h5py_file={targets}",
        "model=gold",
        "sample_ids=1,3,19,29",
        "score_workers=2",
        *extra,
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=workdir, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return workdir / "results" / "scicode" / "gold" / "validation-tool_use-bg"


@pytest.mark.slow
def test_doit_run_executor_dask_matches_local(tmp_path: Path, staged_data_dir: Path, shared_scicode: Path) -> None:
    targets = tmp_path / "test_data_dev.h5"
    shutil.copyfile(shared_scicode / "test_data_dev.h5", targets)
    runs = {}
    for executor in ("local", "dask"):
        workdir = tmp_path / executor
        workdir.mkdir()
        runs[executor] = gold_run(workdir, staged_data_dir, targets, f"executor={executor}")
    summaries = {name: json.loads(summary_file(run, "json").read_text()) for name, run in runs.items()}
    assert {name: summaries["dask"][name] for name in SUMMARY_NUMBERS} == {
        name: summaries["local"][name] for name in SUMMARY_NUMBERS
    }
    assert (summaries["dask"]["main_problem_resolved"], summaries["dask"]["subproblem_correct"]) == (4, 7)
    dask_steps = [
        step
        for path in sorted((runs["dask"] / "details").glob("*.json"))
        for step in json.loads(path.read_text())["attempts"][0]["meta"]["evaluation"]["steps"]
    ]
    assert len(dask_steps) == 7 and all(step["executed_on"].startswith("tcp://127.0.0.1:") for step in dask_steps)
    local_steps = [
        step
        for path in sorted((runs["local"] / "details").glob("*.json"))
        for step in json.loads(path.read_text())["attempts"][0]["meta"]["evaluation"]["steps"]
    ]
    assert all("executed_on" not in step for step in local_steps)
    assert "executor=dask" in summary_file(runs["dask"], "md").read_text()


def test_unreachable_scheduler_is_one_line_and_not_retried_per_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    from stages.score.parent import dask_executor

    monkeypatch.setattr(dask_executor, "CONNECT_TIMEOUT", "1s")
    monkeypatch.setattr(dask_executor, "_FAILURES", {})
    address = "tcp://127.0.0.1:9"  # the discard port: nothing listens
    with pytest.raises(ExecutorError, match=r"^cannot connect to the dask scheduler tcp://127\.0\.0\.1:9: "):
        dask_executor.dask_executor_for(address, 2)
    started = time.monotonic()
    with pytest.raises(ExecutorError, match="cannot connect to the dask scheduler"):
        dask_executor.dask_executor_for(address, 2)
    assert time.monotonic() - started < 0.5, "a second score task waited for the unreachable scheduler again"
