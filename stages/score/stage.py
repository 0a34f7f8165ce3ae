"""score stage: `<run>/details/<id>.json` from `<run>/generations/<id>.json`.

`run_score(settings, problem_id)` scores every step of one problem: prefilled steps are `skipped`
(excluded from totals), steps that generation never produced are `fail` ("not generated: ..."),
steps without code are `parse_error`, steps whose targets are missing are `eval_error`, and every
other step runs its test script in an isolated test process (`engine.execute_step`) unless the
verdict cache already holds the verdict of that exact script. Steps of a problem are submitted
together to the process-wide pool (`pool.shared_slots`), longest expected first.

`score_fingerprint(settings, problem_id)` is what doit's uptodate check compares with the details
file's fingerprint: the score settings, the generation file's code content and status, the problem
record, the targets identity and the scoring engine's source hash.
"""
from __future__ import annotations

import itertools
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, Protocol

from tqdm import tqdm

from stages.artifacts import fingerprint, read_artifact, sha256_file, write_artifact
from stages.config import Settings
from stages.problems import Problem, Step, prefilled_reason, problems_by_id
from stages.score.cache import VerdictCache, cache_at, harness_hash, verdict_key
from stages.score.engine import StepJob, StepVerdict, execute_step
from stages.score.launcher import environment_versions
from stages.score.pool import shared_slots
from stages.score.rewrite import RewriteError, imported_modules, rewrite_tests
from stages.score.script import StepScript, build_step_script
from stages.score.targets_io import TargetsUnavailable, load_step_targets

DetailsStatus = Literal["complete", "generation_error", "missing_generation"]
TARGETS_PLACEHOLDER = "<targets>"
LIBRARIES: tuple[str, ...] = ("numpy", "scipy", "sympy", "mpmath", "h5py")


class ScoringError(RuntimeError):
    """A problem cannot be scored at all (unknown id, unreadable generation); one line."""


class TargetsLike(Protocol):
    kind: str
    path: Path | None
    sha256: str | None
    note: str


@dataclass(frozen=True)
class TargetsInfo:
    kind: str
    path: Path | None
    sha256: str | None
    note: str


def _resolve_targets(settings: Settings) -> TargetsLike:
    from stages.targets import resolve_targets

    return resolve_targets(settings)


_SHA_CACHE: dict[tuple[str, int, int], str] = {}
_SHA_LOCK = threading.Lock()


def targets_identity(targets: TargetsLike) -> dict[str, Any]:
    """Kind, path and sha256 of the targets (hashing the file once per process when no sha256 is known)."""
    sha = targets.sha256
    if sha is None and targets.path is not None and Path(targets.path).is_file():
        stat = Path(targets.path).stat()
        key = (str(Path(targets.path).resolve()), stat.st_size, stat.st_mtime_ns)
        with _SHA_LOCK:
            if key not in _SHA_CACHE:
                _SHA_CACHE[key] = sha256_file(Path(targets.path))
            sha = _SHA_CACHE[key]
    return {"kind": targets.kind, "path": str(targets.path) if targets.path else None, "sha256": sha}


# ---------------------------------------------------------------------------
# Fingerprint
# ---------------------------------------------------------------------------

def _generation_content(record: dict[str, Any] | None) -> Any:
    if record is None:
        return None
    return {
        "status": record.get("status"), "error": record.get("error"),
        "steps": [[s.get("step_id"), s.get("status"), s.get("code"), s.get("error")] for s in record.get("steps", [])],
    }


def score_fingerprint(settings: Settings, problem_id: str, targets: TargetsLike | None = None) -> str:
    """sha256 of everything a problem's details depend on (see the module docstring)."""
    targets = targets or _resolve_targets(settings)
    problem = _problem(settings, problem_id)
    generation = read_artifact(settings.run_paths.generation(problem_id), "generation")
    return fingerprint({
        "settings": settings.fingerprint("score"),
        "problem": problem.fingerprint,
        "generation": _generation_content(generation),
        "targets": targets_identity(targets),
        "harness": harness_hash(),
        "libraries": library_versions(settings.python_binary),
    })


@lru_cache(maxsize=8)
def library_versions(python_binary: str) -> tuple[tuple[str, str], ...]:
    """Versions of the test process's libraries: from package metadata (no import) for this interpreter."""
    if os.path.realpath(python_binary) != os.path.realpath(sys.executable):
        return tuple(sorted(environment_versions(python_binary).items()))
    versions = []
    for name in LIBRARIES:
        try:
            versions.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            versions.append((name, "absent"))
    return tuple(versions)


def _problem(settings: Settings, problem_id: str) -> Problem:
    problems = problems_by_id(settings.data_paths)
    if problem_id not in problems:
        raise ScoringError(f"unknown problem id {problem_id!r}: not in the staged problem files")
    return problems[problem_id]


# ---------------------------------------------------------------------------
# Deciding what each step needs
# ---------------------------------------------------------------------------

@dataclass
class PlannedStep:
    step: Step
    verdict: StepVerdict | None = None
    script: StepScript | None = None
    key: str | None = None
    job: StepJob | None = None


def _generated_steps(generation: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {str(s["step_id"]): s for s in (generation or {}).get("steps", [])}


def _not_generated_reason(generation: dict[str, Any] | None, record: dict[str, Any] | None) -> str:
    if generation is None:
        return "not generated: no generation file"
    detail = (record or {}).get("error") or generation.get("error") or "generation stopped before this step"
    return f"not generated: {detail}"


def _pre_verdict(step: Step, generation: dict[str, Any] | None, record: dict[str, Any] | None) -> StepVerdict | None:
    total = len(step.test_cases)
    if step.prefilled:
        return StepVerdict(step.step_id, "skipped", prefilled_reason(), tests_total=total)
    if record is None or record.get("status") == "error":
        return StepVerdict(step.step_id, "fail", _not_generated_reason(generation, record), tests_total=total)
    if record.get("code") is None:
        why = record.get("status") or "no_code"
        return StepVerdict(step.step_id, "parse_error", f"no code in the answer ({why}): no fenced code block", tests_total=total)
    return None


def _step_codes(problem: Problem, steps: dict[str, dict[str, Any]]) -> dict[str, str | None]:
    return {step.step_id: (steps.get(step.step_id) or {}).get("code") for step in problem.steps}


def plan_steps(settings: Settings, problem: Problem, generation: dict[str, Any] | None, targets: TargetsLike,
               versions: dict[str, str]) -> list[PlannedStep]:
    records = _generated_steps(generation)
    codes = _step_codes(problem, records)
    targets_sha = targets_identity(targets)["sha256"]
    planned = []
    for index, step in enumerate(problem.steps):
        item = PlannedStep(step, verdict=_pre_verdict(step, generation, records.get(step.step_id)))
        if item.verdict is None:
            item.script = build_step_script(problem, index, codes, settings.data_paths)
            item.key = verdict_key(item.script.official_text(TARGETS_PLACEHOLDER), targets_sha, versions,
                                   settings.step_timeout_seconds, settings.step_memory_mb)
        planned.append(item)
    return planned


def _build_job(settings: Settings, item: PlannedStep, targets: TargetsLike) -> StepVerdict | StepJob:
    script = item.script
    assert script is not None
    total = len(script.tests)
    try:
        tests = rewrite_tests(script.tests)
    except RewriteError as error:
        return StepVerdict(script.step_id, "eval_error", f"cannot prepare the tests: {error}", tests_total=total)
    if targets.path is None:
        return StepVerdict(script.step_id, "eval_error", f"targets missing: {targets.note}", tests_total=total)
    try:
        pickles = load_step_targets(Path(targets.path), script.step_id, total, settings.python_binary)
    except TargetsUnavailable as error:
        return StepVerdict(script.step_id, "eval_error", str(error), tests_total=total)
    return StepJob(
        problem_id=script.problem_id, step_id=script.step_id, deps=script.deps,
        sections=tuple((section.label, section.code) for section in script.sections), tests=tests,
        modules=imported_modules([script.deps, *script.tests]), target_pickles=tuple(pickles),
        python_binary=settings.python_binary, timeout_seconds=settings.step_timeout_seconds,
        memory_mb=settings.step_memory_mb, targets_file=str(Path(targets.path).resolve()),
    )


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------

_BAR_POSITIONS = itertools.count()
EXECUTIONS = {"count": 0}
_EXECUTIONS_LOCK = threading.Lock()


def _run_planned(settings: Settings, item: PlannedStep, targets: TargetsLike, cache: VerdictCache) -> StepVerdict:
    assert item.key is not None
    cached = cache.get(item.key)
    if cached is not None:
        return cached
    built = _build_job(settings, item, targets)
    if isinstance(built, StepVerdict):
        return built
    with shared_slots(settings.score_workers).slot(cache.expected_seconds(item.step.step_id)):
        with _EXECUTIONS_LOCK:
            EXECUTIONS["count"] += 1
        verdict = execute_step(built)
    cache.put(item.key, verdict)
    return verdict


def score_steps(settings: Settings, problem: Problem, planned: list[PlannedStep], targets: TargetsLike) -> list[StepVerdict]:
    cache = cache_at(settings.state_paths.verdict_cache)
    runnable = [item for item in planned if item.verdict is None]
    bar = tqdm(total=len(planned), desc=f"score {problem.problem_id}", unit="step", file=sys.stderr, leave=False,
               position=next(_BAR_POSITIONS) % 8, disable=not sys.stderr.isatty())
    bar.update(len(planned) - len(runnable))
    try:
        if runnable:
            with ThreadPoolExecutor(max_workers=len(runnable), thread_name_prefix=f"score-{problem.problem_id}") as pool:
                futures = {id(item): pool.submit(_run_planned, settings, item, targets, cache) for item in runnable}
                for item in runnable:
                    item.verdict = futures[id(item)].result()
                    bar.update(1)
    finally:
        bar.close()
    return [item.verdict for item in planned if item.verdict is not None]


def _details_status(generation: dict[str, Any] | None) -> DetailsStatus:
    if generation is None:
        return "missing_generation"
    return "complete" if generation.get("status") == "complete" else "generation_error"


def build_details(problem: Problem, generation: dict[str, Any] | None, verdicts: list[StepVerdict], targets: TargetsLike,
                  fingerprint_value: str) -> dict[str, Any]:
    scored = [v for v in verdicts if v.status != "skipped"]
    total_correct = sum(v.correct for v in scored)
    problem_correct = bool(scored) and total_correct == len(scored)
    status = _details_status(generation)
    records = _generated_steps(generation)
    codes = {sid: r.get("code") for sid, r in records.items() if r.get("code") is not None}
    trajectory = [{"step_id": sid, **(r.get("trajectory") or {})} for sid, r in records.items()]
    correct = problem_correct and status == "complete"
    evaluation = {
        "problem_id": problem.problem_id, "problem_correct": problem_correct, "total_correct": total_correct,
        "total_steps": len(scored), "subproblem_correctness": [v.correct for v in scored],
        "steps": [v.as_record() for v in verdicts],
        "error": None if status == "complete" else (generation or {}).get("error") or status.replace("_", " "),
        "targets": {"kind": targets.kind, "sha256": targets_identity(targets)["sha256"], "note": targets.note},
    }
    meta: dict[str, Any] = {"evaluation": evaluation}
    if generation is not None:
        meta["usage"] = generation.get("usage", {})
        if "latency_s" in generation:
            meta["latency_s"] = generation["latency_s"]
    return {
        "fingerprint": fingerprint_value, "status": status, "task_id": problem.problem_id, "category": problem.category,
        "attempts": [{
            "final_answer": {"step_codes": codes}, "artifacts": {"step_codes": codes}, "trajectory": trajectory,
            "correct": correct, "score": 1.0 if correct else 0.0, "meta": meta,
        }],
    }


def run_score(settings: Settings, problem_id: str, targets: TargetsLike | None = None) -> dict[str, Any]:
    """Score one problem and write its details file; returns a small summary for doit."""
    problem = _problem(settings, problem_id)
    targets = targets or _resolve_targets(settings)
    generation_path = settings.run_paths.generation(problem_id)
    generation = read_artifact(generation_path, "generation")
    if generation is None and generation_path.exists():
        raise ScoringError(f"generation file {generation_path} does not validate against generation.schema.json")
    if generation is not None and generation.get("problem_id") != problem_id:
        raise ScoringError(f"generation file {generation_path} holds problem {generation.get('problem_id')!r}")
    versions = environment_versions(settings.python_binary)
    planned = plan_steps(settings, problem, generation, targets, versions)
    verdicts = score_steps(settings, problem, planned, targets)
    details = build_details(problem, generation, verdicts, targets, score_fingerprint(settings, problem_id, targets))
    write_artifact(settings.run_paths.details(problem_id), "details", details)
    evaluation = details["attempts"][0]["meta"]["evaluation"]
    return {"problem_id": problem_id, "passed": evaluation["total_correct"], "scored": evaluation["total_steps"],
            "resolved": evaluation["problem_correct"]}
