"""Deriving targets from reference code: the `targets` stage, when the official `test_data.h5` is absent.

Each scored step of a problem that ships reference code (the validation split) runs in a fresh isolated
process: required dependencies, the reference code of steps 1..k (prefilled steps: their official file),
then the step's test cases in order in one namespace, each with its target-reading assert replaced by a
capture of the compared expression (`stages.targets.comparison`). The child turns every captured value
into the official HDF5 layout (`stages.targets.layout`) and pickles that layout back through a temp file.
The parent writes all layouts into one HDF5 file atomically, plus a schema-validated record
(`derived_targets.json`) whose fingerprint covers the problem file, the prefilled files, the derivation
code and the numeric library versions.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import pickle
import platform
import sys
import time
import traceback
from collections.abc import Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from stages.benchmark.datasets import DEFAULT_DATASET, Dataset, dataset_named
from stages.benchmark.problems import Problem, Step, original, prefilled_code
from stages.config.fingerprints import FingerprintParts
from stages.config.settings import Settings
from stages.execution.isolation import Limits, ProcessResult, ScratchDir, run_isolated, scrubbed_environment
from stages.execution.versions import package_versions
from stages.progress.phase import DEFAULT_UNIT_SECONDS, PhaseProgress
from stages.storage.artifacts import fingerprint, read_artifact, read_frozen, sha256_file, write_artifact
from stages.storage.json_values import FrozenObject, JSONObject, JSONValue, number, objects, text
from stages.storage.paths import IMPORT_ROOT, DataPaths
from stages.targets.comparison import CAPTURE_NAME, capture_program, find_target_comparison
from stages.targets.errors import DerivationError, TargetsError
from stages.targets.layout import GZIP_LEVEL, GZIP_MIN_BYTES, H5Group, layout_of_test, write_targets_file

DerivationStepStatus = Literal["ok", "error", "timeout", "crashed"]
DerivationStatus = Literal["complete", "partial", "failed"]

RECORD_KIND = "targets"
DERIVATION_FORMAT = 1  # bump when the layout or the evaluation protocol changes
ENVIRONMENT_PACKAGES = ("numpy", "scipy", "sympy", "h5py")
CHILD_OUTPUT_LIMIT = 16 * 1024
DERIVATION_CODE = ("comparison.py", "layout.py", "derive.py")  # the modules whose source the fingerprint covers


@dataclass(frozen=True)
class DerivationJob:
    step_id: str
    preamble: tuple[tuple[str, str], ...]  # (label, code): dependencies, then steps 1..k
    test_cases: tuple[str, ...]


@dataclass(frozen=True)
class DerivationOutcome:
    step_id: str
    status: DerivationStepStatus
    tests: int
    duration_s: float
    reason: str = ""
    layouts: tuple[H5Group, ...] = field(default=(), repr=False)

    def summary(self) -> JSONObject:
        return {
            "step_id": self.step_id,
            "status": self.status,
            "tests": self.tests,
            "duration_s": round(self.duration_s, 3),
            "reason": self.reason,
        }


def step_jobs(data_paths: DataPaths, problems: Iterable[Problem]) -> list[DerivationJob]:
    """One job per scored step of every problem that ships reference code."""
    jobs: list[DerivationJob] = []
    for problem in problems:
        if not problem.has_reference_code:
            continue
        preamble: list[tuple[str, str]] = [
            (f"<{problem.problem_id} required_dependencies>", problem.required_dependencies)
        ]
        for step in problem.steps:
            preamble.append((f"<{step.step_id} reference code>", _reference_code(data_paths, step)))
            if not step.prefilled:
                jobs.append(DerivationJob(step.step_id, tuple(preamble), step.test_cases))
    return jobs


def _reference_code(data_paths: DataPaths, step: Step) -> str:
    if step.prefilled:
        code = prefilled_code(data_paths, step)
        if code is None:
            raise TargetsError(f"prefilled step {step.step_id} has no official code file")
        return code
    if not step.ground_truth_code:
        raise TargetsError(f"step {step.step_id} has no ground_truth_code")
    return step.ground_truth_code


def evaluate_step(job: DerivationJob) -> tuple[H5Group, ...]:
    """Run the job in this process (the child's work): the layout of every test case's target."""
    namespace: dict[str, object] = {"__name__": "__main__", "__builtins__": builtins}
    for label, code in job.preamble:
        exec(compile(code, label, "exec"), namespace)  # noqa: S102 - reference code, in an isolated child
    layouts: list[H5Group] = []
    for index, source in enumerate(job.test_cases):
        label = f"<{job.step_id} test{index + 1}>"
        try:
            program, comparison = capture_program(source)
        except DerivationError as error:
            raise DerivationError(f"{label}: {error}") from None
        captured: list[Any] = []
        namespace[CAPTURE_NAME] = captured.append
        exec(compile(program, label, "exec"), namespace)  # noqa: S102
        expected_captures = 1 if comparison.kind == "compared" else 0
        if len(captured) != expected_captures:
            raise DerivationError(
                f"{label}: the compared expression ran {len(captured)} times, expected {expected_captures}"
            )
        layouts.append(layout_of_test(captured[0] if captured else None))
    namespace.pop(CAPTURE_NAME, None)
    return tuple(layouts)


@dataclass(frozen=True)
class ChildResult:
    """What the child pickles back: `ok` and the layouts, or how it failed and why."""

    status: DerivationStepStatus
    reason: str = ""
    layouts: tuple[H5Group, ...] = ()


def child_main(job_path: str) -> int:
    """Entry point of the child process: read the job, evaluate it, pickle the result next to it."""
    job_file = Path(job_path)
    spec = json.loads(job_file.read_text(encoding="utf-8"))
    job = DerivationJob(spec["step_id"], tuple(tuple(p) for p in spec["preamble"]), tuple(spec["test_cases"]))
    try:
        result = ChildResult("ok", layouts=evaluate_step(job))
    except BaseException as error:  # noqa: BLE001 - every failure (even SystemExit) is reported, not raised
        # Running out of memory depends on the limit and the load, not only on the code: not deterministic.
        status: DerivationStepStatus = "crashed" if isinstance(error, MemoryError) else "error"
        result = ChildResult(status, _error_line(error) + _error_location(error))
    output = Path(spec["output"])
    partial = output.with_suffix(".partial")
    with open(partial, "wb") as stream:
        pickle.dump(result, stream, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(partial, output)
    return 0 if result.status == "ok" else 1


def _error_line(error: BaseException) -> str:
    message = str(error).strip()
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text.splitlines()[0][:500]


def _error_location(error: BaseException) -> str:
    """` (at <10.3 test2> line 4)`: the innermost frame in reference code or a test case, if any."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename.startswith("<")]
    return f" (at {frames[-1].filename} line {frames[-1].lineno})" if frames else ""


CHILD_ENTRY = "import sys; from stages.targets.derive import child_main; sys.exit(child_main(sys.argv[1]))"


def run_step_isolated(job: DerivationJob, scratch: Path, limits: Limits) -> DerivationOutcome:
    """Evaluate one step in a fresh isolated interpreter; a crash or timeout becomes that step's status."""
    folder = scratch / _safe_step_name(job.step_id)
    folder.mkdir(parents=True)
    output = folder / "result.pickle"
    job_file = folder / "job.json"
    job_file.write_text(
        json.dumps(
            {"step_id": job.step_id, "preamble": job.preamble, "test_cases": job.test_cases, "output": str(output)}
        ),
        encoding="utf-8",
    )
    env = scrubbed_environment({"PYTHONPATH": str(IMPORT_ROOT)}, home=folder)
    process = run_isolated([sys.executable, "-c", CHILD_ENTRY, str(job_file)], cwd=folder, env=env, limits=limits)
    return _outcome(job, process, output, limits)


def _safe_step_name(step_id: str) -> str:
    return "step-" + "".join(ch if ch.isalnum() else "_" for ch in step_id)


def _outcome(job: DerivationJob, process: ProcessResult, output: Path, limits: Limits) -> DerivationOutcome:
    tests, duration = len(job.test_cases), process.duration_s
    if process.timed_out:
        return DerivationOutcome(
            job.step_id, "timeout", tests, duration, f"timed out after {limits.timeout_seconds:g} s"
        )
    if not output.is_file():
        return DerivationOutcome(job.step_id, "crashed", tests, duration, _crash_reason(process))
    with open(output, "rb") as stream:
        result: ChildResult = pickle.load(stream)  # written by our own child process
    if result.status != "ok":
        return DerivationOutcome(job.step_id, result.status, tests, duration, result.reason)
    return DerivationOutcome(job.step_id, "ok", tests, duration, layouts=result.layouts)


def _crash_reason(process: ProcessResult) -> str:
    signal_number = process.killed_by_signal
    cause = f"killed by signal {signal_number}" if signal_number else f"exit code {process.returncode}"
    last = [line for line in process.stderr.splitlines() if line.strip()]
    return f"{cause} without a result" + (f": {last[-1].strip()[:300]}" if last else "")


# ---------------------------------------------------------------------------
# The derive stage
# ---------------------------------------------------------------------------


def derived_record_path(data_paths: DataPaths) -> Path:
    return data_paths.derived_targets.with_suffix(".json")


def derived_targets_fingerprint(settings: Settings) -> str:
    """sha256 over every input of the derived targets: problem and prefilled files, this code, libraries."""
    return fingerprint(_fingerprint_inputs(settings.data_paths).to_record())


def derived_targets_fingerprint_parts(settings: Settings) -> FingerprintParts:
    """`derived_targets_fingerprint` and what it covers by named part (no setting: inputs, code, libraries)."""
    covered = _fingerprint_inputs(settings.data_paths)
    files = {**covered.problems, **covered.prefilled}
    return FingerprintParts(
        fingerprint(covered.to_record()),
        inputs={name: sha and sha[:16] for name, sha in files.items()},
        code={"targets derivation": covered.code, "format": str(DERIVATION_FORMAT)},
        libraries=dict(covered.environment),
    )


@dataclass(frozen=True)
class DerivationInputs:
    """What the derived targets are made from (sha256 by file name; None: not staged); the record's `inputs`."""

    problems: dict[str, str | None]
    prefilled: dict[str, str | None]
    code: str
    environment: dict[str, str]

    def to_record(self) -> JSONObject:
        return {
            "format": DERIVATION_FORMAT,
            "problems": dict(self.problems),
            "prefilled": dict(self.prefilled),
            "code": self.code,
            "environment": dict(self.environment),
        }


def _fingerprint_inputs(data_paths: DataPaths) -> DerivationInputs:
    source = original(data_paths)  # derived targets are the official validation split's
    problems_file = source.file(source.dataset.splits["validation"])
    prefilled_files = sorted(source.dataset.prefilled_steps.values())
    return DerivationInputs(
        problems={problems_file.name: _small_file_sha256(problems_file)},
        prefilled={name: _small_file_sha256(data_paths.file(name)) for name in prefilled_files},
        code=_code_sha256(),
        environment=derivation_environment(),
    )


def _small_file_sha256(path: Path) -> str | None:
    """sha256 of a small data file (problem jsonl, prefilled code); None when it is not staged."""
    try:
        return sha256_file(path)
    except FileNotFoundError:
        return None


@lru_cache(maxsize=1)
def _code_sha256() -> str:
    digest = hashlib.sha256()
    for name in DERIVATION_CODE:
        digest.update((Path(__file__).with_name(name)).read_bytes())
    return digest.hexdigest()


@lru_cache(maxsize=1)
def derivation_environment() -> dict[str, str]:
    """Interpreter and numeric library versions (from package metadata: no import)."""
    return {"python": platform.python_version(), **package_versions(ENVIRONMENT_PACKAGES)}


def derived_targets_current(settings: Settings) -> bool:
    """Up to date: the record validates, carries the current fingerprint, and its file is in place.

    A `partial` record counts as current only when every failed step failed deterministically
    (`error`); steps that timed out or crashed are retried on the next run.
    """
    record = read_frozen(derived_record_path(settings.data_paths), RECORD_KIND)
    return (
        record is not None
        and _record_usable(record, settings)
        and record.get("fingerprint") == derived_targets_fingerprint(settings)
    )


def _record_usable(record: FrozenObject, settings: Settings) -> bool:
    if record.get("status") == "failed":
        return False
    if any(step.get("status") in ("timeout", "crashed") for step in objects(record.get("steps"))):
        return False
    try:
        return settings.data_paths.derived_targets.stat().st_size == record.get("size")
    except OSError:
        return False


def derive_targets(settings: Settings) -> JSONObject:
    """Derive the targets of every validation step from reference code; returns the written record.

    An up-to-date record is returned as is. Steps run longest-first on `score_workers` isolated
    processes; a step that fails, crashes or times out is reported in the record (status `partial`)
    and has no group in the file.
    """
    data_paths = settings.data_paths
    record_path = derived_record_path(data_paths)
    if derived_targets_current(settings):
        return read_artifact(record_path, RECORD_KIND)  # type: ignore[return-value]
    started = time.monotonic()
    source = original(data_paths)  # derived targets are the official validation split's
    problems = [p for p in source.split("validation") if p.has_reference_code]
    jobs = step_jobs(data_paths, problems)
    if not jobs:
        raise TargetsError(
            f"no problem in {source.dataset.splits['validation']} ships reference code: nothing to derive"
        )
    outcomes = run_step_jobs(jobs, settings, expected_durations(read_frozen(record_path, RECORD_KIND)))
    record_path.unlink(missing_ok=True)  # a stale record must not describe the new file
    ordered = [outcomes[job.step_id] for job in jobs]
    succeeded = {o.step_id: o.layouts for o in ordered if o.status == "ok"}
    target_path = data_paths.derived_targets
    digest = write_targets_file(target_path, succeeded)
    record = _derivation_record(settings, problems, ordered, digest, target_path, time.monotonic() - started)
    return write_artifact(record_path, RECORD_KIND, record)


def original_dataset() -> Dataset:
    return dataset_named(DEFAULT_DATASET)


def expected_durations(previous_record: FrozenObject | None) -> dict[str, float]:
    """Expected step durations, to start the longest steps first.

    Measured by the previous derivation when there is one; else the optional `reference_step_seconds`
    table of datasets.json (seconds per step id, measured once); steps in neither are ordered by code size.
    """
    durations = dict(original_dataset().reference_step_seconds)
    for step in objects((previous_record or {}).get("steps")):
        durations[text(step.get("step_id"))] = number(step.get("duration_s"))
    return durations


def longest_first(jobs: Sequence[DerivationJob], durations: dict[str, float]) -> list[DerivationJob]:
    """Steps with an expected duration first, longest first; then the others, largest code first."""

    def cost(job: DerivationJob) -> tuple[bool, float, int]:
        code_size = sum(len(code) for _, code in job.preamble) + sum(len(test) for test in job.test_cases)
        return (job.step_id in durations, durations.get(job.step_id, 0.0), code_size)

    return sorted(jobs, key=cost, reverse=True)


PROGRESS_TICK_S = 1.0  # how often the derivation's progress is looked at while no step finishes


def run_step_jobs(
    jobs: Sequence[DerivationJob], settings: Settings, durations: dict[str, float]
) -> dict[str, DerivationOutcome]:
    """Every job in its own isolated process, `score_workers` at a time, its progress on stderr
    (`stages.progress.phase`: a bar on a terminal, plain lines elsewhere, with the ETA of this phase)."""
    limits = Limits(
        timeout_seconds=settings.step_timeout_seconds,
        memory_mb=settings.step_memory_mb,
        output_limit_bytes=CHILD_OUTPUT_LIMIT,
    )
    progress = PhaseProgress(
        "derive targets",
        "step",
        {job.step_id: durations.get(job.step_id, DEFAULT_UNIT_SECONDS) for job in jobs},
        settings.score_workers,
    )

    def run(job: DerivationJob, scratch: Path) -> DerivationOutcome:
        progress.started(job.step_id)
        return run_step_isolated(job, scratch, limits)

    outcomes: dict[str, DerivationOutcome] = {}
    with (
        ScratchDir(None, "scicode-targets-") as scratch,
        ThreadPoolExecutor(max_workers=settings.score_workers) as pool,
    ):
        pending = {pool.submit(run, job, scratch) for job in longest_first(jobs, durations)}
        try:
            while pending:
                done, pending = wait(pending, timeout=PROGRESS_TICK_S, return_when=FIRST_COMPLETED)
                for future in done:
                    outcome = future.result()
                    outcomes[outcome.step_id] = outcome
                    progress.finished(outcome.step_id, outcome.status == "ok", outcome.duration_s)
                progress.refresh()
        finally:
            progress.close()
    return outcomes


def _derivation_record(
    settings: Settings,
    problems: Sequence[Problem],
    outcomes: Sequence[DerivationOutcome],
    digest: str,
    target_path: Path,
    duration: float,
) -> JSONObject:
    failed = [o for o in outcomes if o.status != "ok"]
    status: DerivationStatus = "complete" if not failed else ("failed" if len(failed) == len(outcomes) else "partial")
    inputs = _fingerprint_inputs(settings.data_paths)
    parts = derived_targets_fingerprint_parts(settings)
    no_target = sum(
        1
        for step in (s for p in problems for s in p.scored_steps)
        for case in step.test_cases
        if find_target_comparison(case).kind == "no_target"
    )
    return {
        **parts.record(),
        "status": status,
        "file": target_path.name,
        "sha256": digest,
        "size": target_path.stat().st_size,
        "inputs": inputs.to_record(),
        "layout": {"gzip_min_bytes": GZIP_MIN_BYTES, "gzip_level": GZIP_LEVEL},
        "counts": {
            "problems": len(problems),
            "steps": len(outcomes),
            "steps_ok": len(outcomes) - len(failed),
            "steps_failed": len(failed),
            "tests": sum(o.tests for o in outcomes),
            "tests_without_target": no_target,
        },
        "steps": [o.summary() for o in outcomes],
        "duration_s": round(duration, 3),
    }


# ---------------------------------------------------------------------------
# Command line: `python -m stages.targets [data_dir]`
# ---------------------------------------------------------------------------


def main(argv: Sequence[str]) -> int:
    """`python -m stages.targets [data_dir]`: derive the targets and print the record's counts."""
    from stages.config.settings import load_settings

    settings = load_settings({"data_dir": argv[0]} if argv else {})
    record = derive_targets(settings)
    failed: list[JSONValue] = [step for step in _objects(record.get("steps")) if step.get("status") != "ok"]
    print(json.dumps({"status": record["status"], "counts": record["counts"], "failed": failed}, indent=2))
    return 0 if record["status"] == "complete" else 1


def _objects(value: JSONValue) -> list[JSONObject]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
