"""Helpers of the scoring tests: jobs built from the validation problems, generation records."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from stages.benchmark.problems import Problem, ProblemSplit, load_split
from stages.benchmark.protocol import DEFAULT_CARRY, Carry
from stages.config.settings import Settings
from stages.records.verdict import StepVerdict
from stages.score.checker.rewrite import imported_modules, rewrite_tests
from stages.score.parent.engine import StepJob, execute_step
from stages.score.parent.limits import StepLimits
from stages.score.parent.script import build_step_script
from stages.score.parent.targets_io import load_step_targets
from stages.storage.artifacts import write_artifact
from stages.storage.json_values import JSONObject, JSONValue
from stages.storage.paths import DataPaths

DEV_TARGETS = "test_data_dev.h5"
ZERO_USAGE = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}


def shared_data_paths(shared_scicode: Path) -> DataPaths:
    return DataPaths(shared_scicode.parent)


def problem(shared_scicode: Path, problem_id: str, split: ProblemSplit = "validation") -> Problem:
    return next(p for p in load_split(shared_data_paths(shared_scicode), split) if p.problem_id == problem_id)


def reference_codes(prob: Problem) -> dict[str, str | None]:
    return {step.step_id: step.ground_truth_code for step in prob.steps}


def make_job(
    shared_scicode: Path,
    prob: Problem,
    step_id: str,
    codes: Mapping[str, str | None] | None = None,
    *,
    timeout: float = 60.0,
    memory_mb: int | None = 8192,
    use_zygote: bool = True,
    deps: str | None = None,
    tests: tuple[str, ...] | None = None,
    carry: Carry = DEFAULT_CARRY,
    python_binary: str = sys.executable,
) -> StepJob:
    codes = dict(reference_codes(prob), **(codes or {}))
    index = next(i for i, step in enumerate(prob.steps) if step.step_id == step_id)
    script = build_step_script(prob, index, codes, shared_data_paths(shared_scicode), carry)
    test_sources = tests if tests is not None else script.tests
    targets = shared_scicode / DEV_TARGETS
    pickles = load_step_targets(targets, step_id, len(script.tests), sys.executable) if tests is None else ()
    return StepJob(
        problem_id=prob.problem_id,
        step_id=step_id,
        deps=script.deps if deps is None else deps,
        sections=tuple((s.label, s.code) for s in script.sections),
        tests=rewrite_tests(test_sources, script.deps if deps is None else deps),
        modules=imported_modules([script.deps, *test_sources]),
        target_pickles=tuple(pickles),
        limits=StepLimits(python_binary, timeout, memory_mb, confinement="not keyed (a test job)"),
        targets_file=str(targets.resolve()),
        use_zygote=use_zygote,
    )


def run_code(shared_scicode: Path, problem_id: str, step_id: str, code: str, **options) -> StepVerdict:
    prob = problem(shared_scicode, problem_id)
    return execute_step(make_job(shared_scicode, prob, step_id, {step_id: code}, **options))


def write_generation(
    settings: Settings,
    prob: Problem,
    codes: Mapping[str, str | None],
    *,
    status: str = "complete",
    error: str | None = None,
    step_status: Mapping[str, str] | None = None,
    stop_after: int | None = None,
) -> dict:
    """A generation.schema-valid record for `prob` with the given codes."""
    steps: list[JSONValue] = []
    for step in prob.steps:
        if stop_after is not None and len(steps) >= stop_after:
            break
        state = (step_status or {}).get(step.step_id) or ("prefilled" if step.prefilled else "ok")
        steps.append(
            {
                "step_id": step.step_id,
                "prefilled": step.prefilled,
                "status": state,
                "prompt_fingerprint": None,
                "code": codes.get(step.step_id),
                "raw_answer": None,
                "error": "API failed" if state == "error" else None,
                "trajectory": {"messages": [], "calls": []},
                "usage": dict(ZERO_USAGE),
                "latency_s": 0.0,
            }
        )
    record: JSONObject = {
        "fingerprint": "0" * 64,
        "status": status,
        "problem_id": prob.problem_id,
        "attempt": 0,
        "model": settings.model,
        "mode": settings.mode,
        "steps": steps,
        "usage": dict(ZERO_USAGE),
        "error": error,
    }
    return write_artifact(settings.run_paths.generation(prob.problem_id), "generation", record)


def reference_code(prob: Problem, step_id: str) -> str:
    """The reference code of step `step_id` of `prob`, which must have one (every validation step has)."""
    code = reference_codes(prob)[step_id]
    assert code is not None, f"step {step_id} has no reference code"
    return code
