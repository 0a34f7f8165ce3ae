"""score stage: `<run>/details/<id>.json` from `<run>/generations/<id>.json`.

`run_score(settings, problem_id)` scores every step of every attempt of one problem (attempts
0..settings.attempts-1, from `generations/<id>.json` and `generations/<id>@<k>.json`). Every verdict is
decided by the rules of `stages.score.checker.verdict_rules`, which this stage calls with what it observed: before
running (prefilled steps are `skipped` and excluded from totals, steps that generation never produced are `fail`
("not generated: ..."), steps without code (none, blank, or too long: `protocol.is_code`) are `parse_error`), steps
whose targets are missing are `eval_error`, and every other step runs its test script in an isolated test process
(`engine.execute_step`, through the executor of `settings.executor`: see executor.py) unless the
verdict cache already holds the verdict of that exact script. Steps of all attempts of a problem are
submitted together, longest expected first; a script that occurs in several attempts runs once (the
other attempts get its verdict marked `cached`). Under `environments=` each step runs in every named interpreter
(`scoring_environments`) until one passes (every one with `all_environments=true`); a cached pass in any of them
decides the step before anything runs, and the step's verdict keeps each consulted environment's verdict
(`environment_verdicts`, `verdict_rules.verdict_over_environments`). Every failed step is published to the live view
(`stages.progress.activity`) as soon as its verdict is known, while the problem's other steps may still run: the steps
decided without a test process (not generated, no code) at once, one line for the steps that share a status
and reason, each tested step when its test process ends. The details file holds `attempts[k]` for every
attempt, each scored like attempt 0; its record-level `status` is attempt 0's.

`score_fingerprint(settings, problem_id)` is what doit's uptodate check compares with the details
file's fingerprint: the score settings, every attempt's generation code content and status, the
problem record, the targets identity and the scoring engine's source hash.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, TypedDict

from stages.benchmark.datasets import DEFAULT_DATASET, dataset_named
from stages.benchmark.problems import Problem, Step
from stages.config.environments import Environment
from stages.config.fingerprints import FingerprintParts, digest, run_relative, settings_slice
from stages.config.settings import Settings
from stages.errors import PipelineError
from stages.execution.scheduling import ExpectedWork
from stages.execution.versions import package_versions
from stages.progress.activity import ACTIVITY, StepFailure
from stages.records import invocations, not_scored
from stages.records.details import GENERATION_FAILED_STATES, Details, DetailsStatus, Evaluation, ScoredAttempt
from stages.records.details import KIND as DETAILS_KIND
from stages.records.generation import GeneratedStep, Generation, read_generation_file
from stages.records.results import cached_selection
from stages.records.run_conditions import generation_tool_outcomes
from stages.records.stamp import Stamp
from stages.records.verdict import StepVerdict
from stages.score.parent.cache import DEFAULT_EXPECTED_SECONDS, VerdictCache, cache_at, scoring_code_hash, verdict_key
from stages.score.parent.limits import StepLimits
from stages.score.parent.script import StepScript, build_step_script
from stages.score.parent.truncation import truncation_note, with_note
from stages.statuses import UNGENERATED_STATUSES, StepStatus
from stages.storage.artifacts import fingerprint, sha256_file, write_artifact
from stages.storage.json_values import JSONObject, freeze_object
from stages.targets import ResolvedTargets, resolve_targets

if TYPE_CHECKING:  # the engine, its executors and the launcher load only when a step is really scored
    from stages.score.parent.engine import StepJob
    from stages.score.parent.executor import StepExecutor

LIBRARIES: tuple[str, ...] = ("numpy", "scipy", "sympy", "mpmath", "h5py")


class ScoringError(PipelineError, RuntimeError):
    """A problem cannot be scored at all (unknown id, unreadable generation); one line."""


_SHA_CACHE: dict[tuple[str, int, int], str] = {}
_SHA_LOCK = threading.Lock()


def targets_identity(targets: ResolvedTargets) -> dict[str, str | None]:
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


def _generation_content(generation: Generation | None) -> JSONObject | None:
    if generation is None:
        return None
    return {
        "status": generation.status,
        "error": generation.error,
        "steps": [[s.step_id, s.status, s.code, s.error] for s in generation.steps],
    }


@dataclass(frozen=True)
class ScoreInputs:
    """What the score fingerprint covers (the fingerprint is that of `record`), and the generation files it read
    (one per attempt, beside the content of each)."""

    settings: str
    problem: str
    generations: tuple[tuple[Path, JSONObject | None], ...]
    targets: dict[str, str | None]
    scoring_code: str
    libraries: tuple[tuple[str, str], ...]

    def record(self) -> JSONObject:
        return {
            "settings": self.settings,
            "problem": self.problem,
            "generation": [content for _, content in self.generations],
            "targets": dict(self.targets),
            "scoring_code": self.scoring_code,
            "libraries": [list(pair) for pair in self.libraries],
        }


def score_fingerprint(settings: Settings, problem_id: str, targets: ResolvedTargets | None = None) -> str:
    """sha256 of everything a problem's details depend on (see the module docstring)."""
    return fingerprint(_score_inputs(settings, problem_id, targets).record())


def _score_inputs(settings: Settings, problem_id: str, targets: ResolvedTargets | None) -> ScoreInputs:
    targets = targets or resolve_targets(settings)
    problem = settings.benchmark.problem(problem_id)
    paths = [settings.run_paths.generation(problem_id, attempt) for attempt in range(settings.attempts)]
    return ScoreInputs(
        settings=settings.fingerprint("score"),
        problem=problem.fingerprint,
        generations=tuple((path, _generation_content(read_generation_file(path))) for path in paths),
        targets=targets_identity(targets),
        scoring_code=scoring_code_hash(),
        libraries=_scoring_libraries(settings),
    )


def _scoring_libraries(settings: Settings) -> tuple[tuple[str, str], ...]:
    """The libraries of the interpreter steps run in; under `environments=`, of each environment, by name."""
    named = settings.grading_environments
    if not named:
        return scoring_library_versions(settings.python_binary)
    return tuple(
        (f"{environment.name} {library}", version)
        for environment in named
        for library, version in scoring_library_versions(environment.python)
    )


def score_fingerprint_parts(
    settings: Settings, problem_id: str, targets: ResolvedTargets | None = None
) -> FingerprintParts:
    """`score_fingerprint` and what it covers by named part (settings, inputs, code, libraries)."""
    covered = _score_inputs(settings, problem_id, targets)
    generations = {
        run_relative(settings, path): None if content is None else digest(content)
        for path, content in covered.generations
    }
    return FingerprintParts(
        fingerprint(covered.record()),
        settings=settings_slice(settings, "score"),
        inputs={
            f"problem {problem_id}": digest(covered.problem),
            "targets": digest(covered.targets),
            **generations,
        },
        code={"scoring harness": covered.scoring_code},
        libraries=dict(covered.libraries),
    )


@lru_cache(maxsize=8)
def scoring_library_versions(python_binary: str) -> tuple[tuple[str, str], ...]:
    """Versions of the test process's libraries: from package metadata (no import) for this interpreter; an
    interpreter that cannot run is `unavailable` (the environment preflight stops the run with one line)."""
    # Compared as given, not resolved: a venv's python links to its base interpreter, but has other libraries.
    if os.path.abspath(python_binary) != os.path.abspath(sys.executable):
        from stages.score.parent.launcher import LaunchError, environment_versions

        try:
            return tuple(sorted(environment_versions(python_binary).items()))
        except (LaunchError, OSError, ValueError, subprocess.SubprocessError):
            return (("python", "unavailable"),)
    return tuple(package_versions(LIBRARIES).items())


# ---------------------------------------------------------------------------
# Deciding what each step needs
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoringEnvironment:
    """One interpreter the steps of a `run_score` call run in: its name ("" without `environments=`), its limits
    (the interpreter is one of them) and its interpreter and library versions (both parts of its verdict keys)."""

    name: str
    limits: StepLimits
    versions: dict[str, str]


def scoring_environments(settings: Settings) -> tuple[ScoringEnvironment, ...]:
    """`environments=`'s interpreters, in order; without it, `python_binary` alone (unnamed)."""
    from stages.score.parent.launcher import environment_versions

    named = settings.grading_environments or (Environment("", settings.python_binary),)
    return tuple(
        ScoringEnvironment(
            environment.name,
            StepLimits.of(dataclasses.replace(settings, python_binary=environment.python)),
            environment_versions(environment.python),
        )
        for environment in named
    )


@dataclass
class PlannedStep:
    step: Step
    attempt: int = 0
    verdict: StepVerdict | None = None
    script: StepScript | None = None
    keys: tuple[str, ...] = ()  # its verdict-cache key in each scoring environment, in order


def _generated_steps(generation: Generation | None) -> dict[str, GeneratedStep]:
    return {s.step_id: s for s in generation.steps} if generation is not None else {}


def _step_codes(problem: Problem, steps: dict[str, GeneratedStep]) -> dict[str, str | None]:
    return {step.step_id: found.code if (found := steps.get(step.step_id)) else None for step in problem.steps}


def plan_steps(
    settings: Settings,
    problem: Problem,
    generation: Generation | None,
    targets: ResolvedTargets,
    environments: tuple[ScoringEnvironment, ...],
    attempt: int = 0,
) -> list[PlannedStep]:
    from stages.score.checker.verdict_rules import verdict_before_running  # loaded only when steps are scored

    records = _generated_steps(generation)
    codes = _step_codes(problem, records)
    targets_sha = targets_identity(targets)["sha256"]
    planned = []
    for index, step in enumerate(problem.steps):
        item = PlannedStep(step, attempt, verdict=verdict_before_running(step, generation, records.get(step.step_id)))
        if item.verdict is None:
            item.script = build_step_script(problem, index, codes, settings.data_paths, settings.carry)
            item.keys = tuple(verdict_key(item.script, targets_sha, env.versions, env.limits) for env in environments)
        planned.append(item)
    return planned


def _build_job(item: PlannedStep, targets: ResolvedTargets, limits: StepLimits) -> StepVerdict | StepJob:
    """The step's job, without target values: the executor reads them from `targets_file` where it runs."""
    from stages.score.checker.verdict_rules import targets_missing
    from stages.score.parent.request import job_for_script

    script = item.script
    assert script is not None
    if targets.path is None:
        return targets_missing(script.step_id, len(script.tests), targets.note)
    return job_for_script(script, limits=limits, targets_file=Path(targets.path))


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------

EXECUTIONS = {"count": 0}  # test processes started by this process's scoring (any executor)
_EXECUTIONS_LOCK = threading.Lock()


@dataclass(frozen=True)
class ScoringContext:
    """What every step of one `run_score` call shares."""

    settings: Settings
    targets: ResolvedTargets
    targets_sha256: str | None
    environments: tuple[ScoringEnvironment, ...]  # each step runs in these, in order (limits and versions of each)
    cache: VerdictCache
    executor: StepExecutor
    rescored: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)  # (step, cached, new) re-executed


@lru_cache(maxsize=4)
def reference_seconds(dataset: str = DEFAULT_DATASET) -> Mapping[str, float]:
    """Measured wall times of the dataset's slow reference steps (datasets.json): longest first on a first run too."""
    return dataset_named(dataset).reference_step_seconds


def expected_step_seconds(cache: VerdictCache, step_id: str, dataset: str = DEFAULT_DATASET) -> float:
    """The step's last duration measured here, else its pinned reference duration, else the default."""
    return cache.expected_seconds(step_id, default=reference_seconds(dataset).get(step_id, DEFAULT_EXPECTED_SECONDS))


def expected_work(settings: Settings, problem_id: str) -> ExpectedWork:
    """What scoring one attempt of a selected problem is expected to take (its scored steps, as selection.json
    lays them out); ScoringError when the problem is not in the run's selection."""
    selection = cached_selection(settings.run_paths)
    entry = selection.by_id.get(problem_id) if selection is not None else None
    if entry is None:
        raise ScoringError(f"problem {problem_id} is not in {settings.run_paths.selection}: run `doit select` first")
    cache = cache_at(settings.state_paths.verdict_cache)
    steps = entry.scored_step_ids
    return ExpectedWork(
        problem_id, len(steps), sum(expected_step_seconds(cache, step_id, settings.dataset) for step_id in steps)
    )


def reexecuted(rescore: str, cached: StepVerdict) -> bool:
    """Whether `rescore=` re-executes a step whose verdict the cache holds (`true`: every one; `timeouts`: a
    timeout's)."""
    return rescore == "true" or (rescore == "timeouts" and cached.status == "timeout")


def _usable_cached(context: ScoringContext, key: str) -> StepVerdict | None:
    """The cache's verdict for `key`, unless `rescore=` executes it again."""
    cached = context.cache.get(key)
    return None if cached is None or reexecuted(context.settings.rescore, cached) else cached


def _run_planned(context: ScoringContext, item: PlannedStep, expected: float, problem_seconds: float) -> StepVerdict:
    """The step's verdict over its scoring environments (see `environment_verdicts` and
    `verdict_rules.verdict_over_environments`)."""
    from stages.score.checker.verdict_rules import verdict_over_environments

    found = environment_verdicts(context, item, expected, problem_seconds)
    return verdict_over_environments(tuple(environment.name for environment in context.environments), found)


def environment_verdicts(
    context: ScoringContext, item: PlannedStep, expected: float, problem_seconds: float
) -> dict[int, StepVerdict]:
    """Each environment's verdict by its index, for those consulted: the cache first (a cached pass in any
    environment decides the step, so adding an environment re-grades only the steps not yet passed), then each
    environment in order until one passes (every one under `all_environments=true`)."""
    every = context.settings.all_environments
    found = {index: cached for index, key in enumerate(item.keys) if (cached := _usable_cached(context, key))}
    if not every and any(verdict.status == "pass" for verdict in found.values()):
        return found
    for index, environment in enumerate(context.environments):
        if index not in found:
            previous = context.cache.get(item.keys[index])
            found[index] = _execute(context, environment, item, item.keys[index], (expected, problem_seconds))
            if previous is not None:
                context.rescored.append((item.step.step_id, previous.status, found[index].status))
        if found[index].status == "pass" and not every:
            break
    return found


def _execute(
    context: ScoringContext,
    environment: ScoringEnvironment,
    item: PlannedStep,
    key: str,
    seconds: tuple[float, float],
) -> StepVerdict:
    """Run the step's test process in one environment (`seconds`: the step's and its problem's expected seconds)."""
    built = _build_job(item, context.targets, environment.limits)
    if isinstance(built, StepVerdict):
        return built
    from stages.score.parent.request import StepRequest

    versions = tuple(sorted(environment.versions.items()))
    request = StepRequest(built, context.targets_sha256, versions, *seconds)
    verdict = context.executor.run(request)
    if verdict.launch_mode:
        with _EXECUTIONS_LOCK:
            EXECUTIONS["count"] += 1
    context.cache.put(key, verdict)
    return verdict


VerdictListener = Callable[[list[PlannedStep]], None]
PASSING_STATUSES: frozenset[StepStatus] = frozenset({"pass", "skipped"})


def _ignore(items: list[PlannedStep]) -> None:
    return None


def score_steps(
    context: ScoringContext, problem: Problem, planned: list[PlannedStep], on_verdicts: VerdictListener = _ignore
) -> None:
    """Give every planned step (of any attempt) its verdict; each distinct script runs at most once. The steps of
    each script are given to `on_verdicts` as soon as their verdict is known."""
    runnable: dict[tuple[str, ...], list[PlannedStep]] = {}
    for item in planned:
        if item.verdict is None:
            assert item.keys
            runnable.setdefault(item.keys, []).append(item)
    if not runnable:
        return
    expected = {
        key: expected_step_seconds(context.cache, items[0].step.step_id, context.settings.dataset)
        for key, items in runnable.items()
    }
    slowest = max(expected.values())
    with ThreadPoolExecutor(max_workers=len(runnable), thread_name_prefix=f"score-{problem.problem_id}") as pool:
        futures: dict[Future[StepVerdict], tuple[str, ...]] = {
            pool.submit(_run_planned, context, items[0], expected[key], slowest): key for key, items in runnable.items()
        }
        for future in as_completed(futures):
            items = runnable[futures[future]]
            verdict = future.result()
            items[0].verdict = verdict
            for twin in items[1:]:  # the same script in another attempt: the same verdict, not run again
                twin.verdict = dataclasses.replace(verdict, cached=True)
            on_verdicts(items)


def _noted(verdict: StepVerdict, generation: Generation | None) -> StepVerdict:
    """The verdict with the truncation of its step's answers said in its reason (stages.score.parent.truncation)."""
    step = _generated_steps(generation).get(verdict.step_id)
    note = truncation_note(step.to_record() if step else {})
    return verdict if note is None else dataclasses.replace(verdict, reason=with_note(verdict.reason, note))


def counted_status(verdict: StepVerdict, generation: Generation | None) -> StepStatus | Literal["not_generated"]:
    """The verdict's status as the counts say it: `not_generated` for a failing step the model never answered."""
    step = _generated_steps(generation).get(verdict.step_id)
    never_answered = step is not None and step.status in UNGENERATED_STATUSES
    return "not_generated" if verdict.status == "fail" and never_answered else verdict.status


def step_failures(problem_id: str, items: list[PlannedStep], generations: list[Generation | None]) -> list[StepFailure]:
    """The failed steps among `items` (their verdicts known), one record per attempt, status and reason."""
    grouped: dict[tuple[int, StepStatus | Literal["not_generated"], str], list[str]] = {}
    for item in items:
        if item.verdict is None or item.verdict.status in PASSING_STATUSES:
            continue
        verdict = _noted(item.verdict, generations[item.attempt])
        status = counted_status(verdict, generations[item.attempt])
        grouped.setdefault((item.attempt, status, verdict.reason), []).append(verdict.step_id)
    return [
        StepFailure(problem_id, attempt, tuple(step_ids), status, reason)
        for (attempt, status, reason), step_ids in grouped.items()
    ]


def publish_failures(problem_id: str, generations: list[Generation | None]) -> VerdictListener:
    """What gives the live view the failed steps among the items it is called with."""

    def publish(items: list[PlannedStep]) -> None:
        for failure in step_failures(problem_id, items, generations):
            ACTIVITY.add_step_failure(failure)

    return publish


def _details_status(generation: Generation | None) -> DetailsStatus:
    if generation is None:
        return "missing_generation"
    return "complete" if generation.status == "complete" else "generation_error"


def attempt_record(
    problem: Problem, generation: Generation | None, verdicts: list[StepVerdict], targets: ResolvedTargets
) -> ScoredAttempt:
    """One entry of the details file's `attempts`: the attempt's codes, trajectory and evaluation."""
    status = _details_status(generation)
    records = _generated_steps(generation)
    codes = freeze_object({sid: step.code for sid, step in records.items() if step.code is not None})
    trajectory = tuple(MappingProxyType({"step_id": sid, **step.trajectory}) for sid, step in records.items())
    error = None if status == "complete" else (generation.error if generation else None) or status.replace("_", " ")
    targets_record: JSONObject = {
        "kind": targets.kind,
        "sha256": targets_identity(targets)["sha256"],
        "note": targets.note,
    }
    evaluation = Evaluation.of(problem.problem_id, verdicts, error, targets_record)
    correct = evaluation.problem_correct and status == "complete"
    return ScoredAttempt(
        index=0,
        final_codes=codes,
        artifact_codes=codes,
        trajectory=trajectory,
        correct=correct,
        score=1.0 if correct else 0.0,
        evaluation=evaluation,
        tool_outcomes=freeze_object(generation.tool_outcomes() if generation else generation_tool_outcomes(None)),
        usage_record=generation.usage_record if generation else None,
        latency_s=generation.latency_s if generation else None,
    )


def build_details(
    problem: Problem,
    generations: list[Generation | None],
    verdicts: list[list[StepVerdict]],
    targets: ResolvedTargets,
    fingerprint_parts: FingerprintParts,
) -> Details:
    """The details record: one attempt per generation; the record-level status is attempt 0's."""
    attempts = tuple(
        dataclasses.replace(attempt_record(problem, generation, attempt_verdicts, targets), index=index)
        for index, (generation, attempt_verdicts) in enumerate(zip(generations, verdicts))
    )
    status = _details_status(generations[0])
    single_failed = len(attempts) == 1 and status in GENERATION_FAILED_STATES
    return Details(
        task_id=problem.problem_id,
        status=status,
        category=problem.category,
        attempts=tuple(dataclasses.replace(attempt, record_failed=single_failed) for attempt in attempts),
        stamp=Stamp.of(fingerprint_parts),
    )


def _read_generation(settings: Settings, problem_id: str, attempt: int) -> Generation | None:
    path = settings.run_paths.generation(problem_id, attempt)
    generation = read_generation_file(path)
    if generation is None and path.exists():
        raise ScoringError(f"generation file {path} does not validate against generation.schema.json")
    if generation is not None and generation.problem_id != problem_id:
        raise ScoringError(f"generation file {path} holds problem {generation.problem_id!r}")
    if generation is not None and generation.attempt != attempt:
        raise ScoringError(f"generation file {path} holds attempt {generation.attempt}, expected {attempt}")
    return generation


def _executor(settings: Settings) -> StepExecutor:
    from stages.score.parent.executor import ExecutorError, executor_for

    try:
        return executor_for(settings)
    except ExecutorError as error:
        raise ScoringError(str(error)) from None


def report_rescored(problem_id: str, rescored: list[tuple[str, str, str]]) -> None:
    """Under `rescore=`: one `changed: <step> <old> -> <new>` line per verdict that flipped, then the count (a
    flakiness check)."""
    if not rescored:
        return
    changed = sorted(item for item in rescored if item[1] != item[2])
    lines = [f"changed: {step} {old} -> {new}" for step, old, new in changed]
    lines.append(
        f"rescore: problem {problem_id}: {len(rescored)} cached verdict(s) re-executed, {len(changed)} changed"
    )
    print("\n".join(lines), flush=True)


class _ScoreCounts(TypedDict):
    problem_id: str
    passed: int  # attempt 1's passed and scored steps
    scored: int
    resolved: bool


class ScoreSummary(_ScoreCounts, total=False):
    """What `run_score` returns (doit keeps it as the task's values): attempt 1's counts, and with several
    attempts whether each resolved the problem."""

    attempts_resolved: list[bool]


def run_score(settings: Settings, problem_id: str, targets: ResolvedTargets | None = None) -> ScoreSummary:
    """Score every attempt of one problem and write its details file; returns a small summary for doit. Its start
    and end are recorded in the run's invocations.jsonl (`stages.records.invocations`)."""
    with invocations.recorded(settings.run_paths, "score", problem_id):
        return _score_problem(settings, problem_id, targets)


def _score_problem(settings: Settings, problem_id: str, targets: ResolvedTargets | None) -> ScoreSummary:
    problem = settings.benchmark.problem(problem_id)
    executor = _executor(settings)
    targets = targets or resolve_targets(settings)
    generations = [_read_generation(settings, problem_id, attempt) for attempt in range(settings.attempts)]
    environments = scoring_environments(settings)
    context = ScoringContext(
        settings,
        targets,
        targets_identity(targets)["sha256"],
        environments,
        cache_at(settings.state_paths.verdict_cache),
        executor,
    )
    planned = [
        plan_steps(settings, problem, generation, targets, environments, attempt)
        for attempt, generation in enumerate(generations)
    ]
    steps = [item for attempt in planned for item in attempt]
    publish = publish_failures(problem_id, generations)
    publish([item for item in steps if item.verdict is not None])  # decided without a test process
    score_steps(context, problem, steps, publish)
    report_rescored(problem_id, context.rescored)
    verdicts = [
        [_noted(item.verdict, generation) for item in attempt if item.verdict is not None]
        for attempt, generation in zip(planned, generations)
    ]
    details = build_details(
        problem, generations, verdicts, targets, score_fingerprint_parts(settings, problem_id, targets)
    )
    not_scored.clear(settings.run_paths, problem_id)  # first: never a stale record beside current details
    write_artifact(settings.run_paths.details(problem_id), DETAILS_KIND, details.to_record())
    evaluations = [attempt.evaluation for attempt in details.attempts]
    summary: ScoreSummary = {
        "problem_id": problem_id,
        "passed": evaluations[0].total_correct,
        "scored": evaluations[0].total_steps,
        "resolved": evaluations[0].problem_correct,
    }
    if len(evaluations) > 1:
        summary["attempts_resolved"] = [evaluation.problem_correct for evaluation in evaluations]
    return summary
