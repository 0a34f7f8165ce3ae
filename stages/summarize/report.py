"""`<run>/report.html`: one self-contained page to study a run.

The page is rendered by the page writer (`stages.pages.writer`: Jinja2 with autoescaping on, model output is
untrusted text and is only ever shown as text) from the templates in `stages/pages/templates/`; the CSS and the
small script that filters the grid and opens a step live in the templates, so the page works offline, from disk
or from an email attachment. Every step view sits in an inert `<template>` element and is cloned into the page
when opened (`report.html#s-<step id>-a<attempt>`). The views of one step (all its attempts) are rendered
by Jinja2 like the rest of the page and stored gzip-compressed (base64, in a non-script data element);
the page's script inflates them only when the step is opened, which keeps an 80 problems x 3 attempts
report small and quick to open.

A step view shows the verdict and its reason; for a fail decided by a failed check, what it compared (the
model-side values the checker described, beside the target part each was compared with, read here from the
targets file, and their largest absolute and relative differences: `stages.summarize.report_values`); the whole
conversation in order (prompts, every assistant turn with its reasoning text when the API returned it and its
model call's tokens and latency, every tool call and its result; a generation written before turns were
recorded says "turns not recorded" and shows the prompt and the tool calls); the raw answer, the extracted
code, the test script as the scoring harness ran it (in the parts whose names the tracebacks carry, e.g.
`<scicode-step 2.2 code>`, each with its own line numbers), the test process's stdout and stderr as stored,
the test duration, tokens and model latency.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from markupsafe import Markup

from stages.benchmark.problems import Benchmark, Problem, ProblemDataError
from stages.benchmark.protocol import Carry, is_code
from stages.benchmark.weak_tests import weak_test
from stages.config.settings import Settings
from stages.execution.untrusted import valid_text
from stages.generate.identity import where_snippets_ran
from stages.pages.writer import REPORT_PAGE, STEP_TEMPLATE, environment, problem_anchor, render, step_anchor
from stages.records.results import (
    CELL_STATUSES,
    OCCASIONAL_STATUSES,
    GeneratedStep,
    Generation,
    ProblemResult,
    RunResults,
    ScoredAttempt,
    ToolRun,
)
from stages.records.status_glossary import GLOSSARY
from stages.records.summary import ProjectVersion, Summary
from stages.records.verdict import StepVerdict
from stages.statuses import TOOL_STATUSES
from stages.storage.artifacts import atomic_write_text
from stages.storage.paths import DataPaths
from stages.summarize.fingerprint_mark import html_mark
from stages.summarize.report_values import ComparedView, TargetsOf, compared_view

RAN_STATUSES = frozenset({"pass", "fail", "timeout"})


# ---------------------------------------------------------------------------
# View records (what the template shows)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ScriptPart:
    """One compiled part of a test script: the name tracebacks give it and its numbered lines."""

    label: str
    traceback_name: str
    numbered: str


@dataclass(frozen=True)
class StepView:
    anchor: str
    problem_id: str
    step_id: str
    attempt: int
    attempts: int
    status: str
    reason: str
    verdict: StepVerdict | None
    generated: GeneratedStep | None
    tool_calls: tuple[ToolRun, ...]
    script: tuple[ScriptPart, ...]
    script_note: str
    other_attempts: tuple[tuple[int, str, str], ...]  # (attempt, status, anchor) of the same step
    weak_test: str | None = None  # a pass on known-weak official tests: why they are weak
    compared: ComparedView | None = None  # a fail decided by a failed check: what it compared, target beside

    @property
    def tokens(self) -> str:
        usage = self.generated.usage if self.generated else None
        return "-" if usage is None else f"{usage.input_tokens} in / {usage.output_tokens} out ({usage.calls} calls)"


@dataclass(frozen=True)
class Cell:
    step_id: str
    status: str
    anchor: str
    title: str
    weak: bool = False  # a pass on known-weak official tests (stages.benchmark.weak_tests)


@dataclass(frozen=True)
class ProblemView:
    anchor: str
    problem_id: str
    field: str
    subfield: str
    split: str
    state: str
    resolved: bool
    passed: int
    scored: int
    error: str | None
    generation_error: str | None
    cells: tuple[Cell, ...]
    statuses: str  # space-separated statuses of its cells, for the filter
    cost: float | None = None  # all attempts, from the price settings (None: no price or no usage)

    @property
    def failed(self) -> bool:
        return not self.resolved


@dataclass(frozen=True)
class StepBlob:
    """The rendered views of every attempt of one step, gzip-compressed and base64-encoded."""

    step_id: str
    data: str


@dataclass(frozen=True)
class ConfigurationView:
    """The header block of a report: the run's whole configuration as config.json records it (secrets already
    redacted there), the library versions, the confinement of model code and the project's version."""

    settings: tuple[tuple[str, str], ...]
    versions: tuple[tuple[str, str], ...]
    confinement: str
    snippets: str  # where tool snippets ran: local, or which sandbox
    project: str
    recorded: bool  # config.json was readable
    endpoints: tuple[str, ...] = ()  # every endpoint that answered, one phrase each (summary.json's setup)


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def project_text(project: ProjectVersion | None) -> str:
    """`scicode-pipeline 0.1.0, commit 0fdba41c... (tracked files modified)`."""
    if project is None:
        return "unknown"
    return (
        f"{project.name} {project.version or '(version unknown)'}, "
        + (f"commit {project.commit}" if project.commit else "no git commit (not a checkout)")
        + (" (tracked files modified)" if project.dirty else "")
    )


def configuration_view(config: Mapping[str, Any] | None, summary: Summary) -> ConfigurationView:
    recorded = config or {}
    return ConfigurationView(
        settings=tuple((name, _shown(value)) for name, value in sorted((recorded.get("settings") or {}).items())),
        versions=tuple((name, _shown(value)) for name, value in sorted((recorded.get("versions") or {}).items())),
        confinement=str(recorded.get("confinement") or "unknown (config.json has none)"),
        snippets=where_snippets_ran(recorded.get("settings") or {}),
        project=project_text(summary.project),
        recorded=config is not None,
        endpoints=tuple(use.shown() for use in summary.setup.endpoints),
    )


@dataclass
class RunView:
    title: str
    configuration: ConfigurationView | None = None
    problems: list[ProblemView] = field(default_factory=list)
    steps: list[StepView] = field(default_factory=list)
    blobs: list[StepBlob] = field(default_factory=list)


# ---------------------------------------------------------------------------
# Test scripts
# ---------------------------------------------------------------------------


def numbered(text: str) -> str:
    lines = text.split("\n")
    width = len(str(len(lines)))
    return "\n".join(f"{index:>{width}}  {line}" for index, line in enumerate(lines, start=1))


def _script_parts(
    problem: Problem, index: int, codes: Mapping[str, str | None], data_paths: DataPaths, carry: Carry
) -> tuple[ScriptPart, ...]:
    """The parts the test process and the checker compile for a step, from the functions that build them for
    scoring: the dependencies, each code section, and each test case as split by `rewrite_tests` (the part
    run in the test process, `<scicode-test k>`, and the assertions the checker decides,
    `<scicode-check test k>`)."""
    from stages.score import build_step_script

    script = build_step_script(problem, index, codes, data_paths, carry)
    parts = [ScriptPart("dependencies", "<scicode-dependencies>", numbered(script.deps))]
    parts += [
        ScriptPart(section.label, f"<scicode-{section.label}>", numbered(section.code)) for section in script.sections
    ]
    return tuple(parts) + _test_parts(tuple(script.tests), script.deps)


@lru_cache(maxsize=512)
def _test_parts(tests: tuple[str, ...], deps: str) -> tuple[ScriptPart, ...]:
    """The test cases as they are compiled (the same for every attempt of a step, so computed once)."""
    from stages.score import RewriteError, rewrite_tests

    try:
        rewritten = rewrite_tests(tests, deps)
    except RewriteError as error:
        return (ScriptPart("tests", "(not run)", f"the tests could not be prepared: {error}"),)
    parts = []
    for number, test in enumerate(rewritten, start=1):
        parts.append(ScriptPart(f"test {number}", f"<scicode-test {number}>", numbered(test.prefetch)))
        if test.check is not None:
            parts.append(
                ScriptPart(
                    f"test {number}: the assertions, decided by the checker with the stored target",
                    f"<scicode-check test {number}>",
                    numbered(test.check),
                )
            )
    return tuple(parts)


def _codes(generation: Generation | None, attempt: ScoredAttempt | None) -> dict[str, str | None]:
    if generation is not None:
        return {step.step_id: step.code for step in generation.steps}
    return dict(attempt.step_codes) if attempt is not None else {}


def _script_of(
    problem: Problem | None,
    index: int,
    codes: Mapping[str, str | None],
    verdict: StepVerdict | None,
    data_paths: DataPaths,
    carry: Carry,
) -> tuple[tuple[ScriptPart, ...], str]:
    step_id = problem.steps[index].step_id if problem else ""
    if problem is None:
        return (), "test script unavailable: the problem file of this selection is not staged"
    code = codes.get(step_id)
    if not isinstance(code, str) or not is_code(code):
        return (), "no test script: the step has no code"
    try:
        parts = _script_parts(problem, index, codes, data_paths, carry)
    except (ValueError, ProblemDataError, OSError) as error:
        return (), f"test script unavailable: {error}"
    ran = verdict is not None and (verdict.status in RAN_STATUSES or verdict.returncode is not None)
    return parts, "as run by the scoring harness" if ran else "not run: " + (
        verdict.reason if verdict else "no verdict"
    )


# ---------------------------------------------------------------------------
# Building the run view
# ---------------------------------------------------------------------------


def _problems_of(benchmark: Benchmark, run: RunResults) -> dict[str, Problem]:
    """The staged problem records whose fingerprint is the one selected."""
    try:
        staged = {problem.problem_id: problem for problem in benchmark.problems("all")}
    except ProblemDataError:
        return {}
    return {
        entry.problem_id: staged[entry.problem_id]
        for entry in run.selection.entries
        if entry.problem_id in staged and staged[entry.problem_id].fingerprint == entry.fingerprint
    }


def targets_reader(settings: Settings, problems: Mapping[str, Problem]) -> TargetsOf:
    """A step's target values by test, read once per step from the run's targets file when a view needs them
    (only for report.html: never written elsewhere); the reason as text when they cannot be read."""
    from stages.score import read_step_targets
    from stages.targets.resolve import resolve_targets

    counts = {step.step_id: len(step.test_cases) for problem in problems.values() for step in problem.steps}
    found: dict[str, Sequence[Any] | str] = {}

    def read(step_id: str) -> Sequence[Any] | str:
        if step_id not in found:
            found[step_id] = _read_targets(settings, step_id, counts.get(step_id), resolve_targets, read_step_targets)
        return found[step_id]

    return read


def _read_targets(settings: Settings, step_id: str, count: int | None, resolve: Any, read: Any) -> Sequence[Any] | str:
    if count is None:
        return "the step is not in the staged problem file"
    try:
        resolved = resolve(settings)
        if resolved.path is None:
            return f"no targets file ({resolved.note})"
        return list(read(resolved.path, step_id, count))
    except Exception as error:  # noqa: BLE001 - a report is written whatever the targets file holds
        return valid_text(f"{type(error).__name__}: {error}")[:300]


def _step_view(
    result: ProblemResult,
    problem: Problem | None,
    step_id: str,
    attempt: int,
    attempts: int,
    row_status: str,
    row_reason: str,
    settings: Settings,
    others: tuple[tuple[int, str, str], ...],
    targets_of: TargetsOf,
) -> StepView:
    scored = result.scored_attempt(attempt)
    generation = result.generation(attempt)
    verdict = scored.verdict(step_id) if scored else None
    generated = generation.step(step_id) if generation else None
    index = next((i for i, step in enumerate(problem.steps) if step.step_id == step_id), None) if problem else None
    script: tuple[ScriptPart, ...]
    if index is None:
        script, note = (), "test script unavailable: the step is not in the staged problem file"
    else:
        script, note = _script_of(
            problem, index, _codes(generation, scored), verdict, settings.data_paths, settings.carry
        )
    status = verdict.status if verdict else row_status
    reason = verdict.reason if verdict else row_reason
    weak = weak_test(step_id) if status == "pass" else None
    return StepView(
        step_anchor(step_id, attempt),
        result.problem_id,
        step_id,
        attempt,
        attempts,
        status,
        reason,
        verdict,
        generated,
        generated.tool_calls if generated else (),
        script,
        note,
        others,
        weak.note if weak else None,
        compared_view(verdict.compared, step_id, targets_of) if verdict and verdict.status == "fail" else None,
    )


def _attempt_status(result: ProblemResult, step_id: str, attempt: int) -> str:
    scored = result.scored_attempt(attempt)
    verdict = scored.verdict(step_id) if scored else None
    return verdict.status if verdict else "no_verdict"


def build_run_view(settings: Settings, run: RunResults, rows: Sequence[Any], summary: Summary) -> RunView:
    """The report's records: a grid row per problem (attempt 1) and a step view per step and attempt."""
    problems = _problems_of(settings.benchmark, run)
    targets_of = targets_reader(settings, problems)
    costs = {problem.problem_id: problem.cost for problem in summary.problems}
    view = RunView(
        title=f"{summary.identity.model} / {summary.identity.run}",
        configuration=configuration_view(run.config, summary),
    )
    for result, row in zip(run.problems, rows):
        problem = problems.get(result.problem_id)
        attempts = result.attempt_count
        cells = []
        for step in row.steps:
            anchors = tuple(
                (k, _attempt_status(result, step.step_id, k), step_anchor(step.step_id, k)) for k in range(attempts)
            )
            weak = weak_test(step.step_id) if step.status == "pass" else None
            title = f"{step.step_id}: {step.status}" + (f" ({weak.note})" if weak else "")
            cells.append(Cell(step.step_id, step.status, step_anchor(step.step_id), title, weak is not None))
            for attempt in range(attempts):
                others = tuple(item for item in anchors if item[0] != attempt)
                status, reason = (
                    (step.status, step.reason) if attempt == 0 else ("no_verdict", "no verdict for this attempt")
                )
                view.steps.append(
                    _step_view(
                        result, problem, step.step_id, attempt, attempts, status, reason, settings, others, targets_of
                    )
                )
        generation = result.generation(0)
        view.problems.append(
            ProblemView(
                anchor=problem_anchor(result.problem_id),
                problem_id=result.problem_id,
                field=row.field,
                subfield=row.subfield,
                split=row.split,
                state=row.state,
                resolved=row.resolved,
                passed=row.steps_passed,
                scored=row.steps_scored,
                error=row.error,
                generation_error=generation.error if generation else None,
                cells=tuple(cells),
                statuses=" ".join(sorted({cell.status for cell in cells})),
                cost=costs.get(result.problem_id),
            )
        )
    return view


def compressed(text: str) -> str:
    """gzip (without a timestamp, so identical inputs give identical pages) then base64 (of valid text: a lone
    surrogate in a step's code or output becomes U+FFFD, as in every other write)."""
    data = valid_text(text).encode("utf-8")
    return base64.b64encode(gzip.compress(data, compresslevel=6, mtime=0)).decode("ascii")


def step_blobs(steps: Sequence[StepView]) -> list[StepBlob]:
    """One blob per step id with the views of all its attempts, in grid order."""
    grouped: dict[str, list[StepView]] = {}
    for step in steps:
        grouped.setdefault(step.step_id, []).append(step)
    template = environment().get_template(STEP_TEMPLATE)
    return [StepBlob(step_id, compressed(template.render(steps=views))) for step_id, views in grouped.items()]


def write_report(settings: Settings, run: RunResults, rows: Sequence[Any], summary: Summary) -> Path:
    """Render `<run>/report.html` (atomically) from the run's records and its summary."""
    view = build_run_view(settings, run, rows, summary)
    view.blobs = step_blobs(view.steps)
    html = render(
        REPORT_PAGE,
        view=view,
        summary=summary.to_record(),  # the page's template reads the record's JSON form
        judged=summary,
        statuses=CELL_STATUSES,
        occasional_statuses=OCCASIONAL_STATUSES,
        glossary=GLOSSARY,
        tool_statuses=TOOL_STATUSES,
        fingerprint_mark=Markup(html_mark(summary.fingerprint)),
    )
    path = settings.run_paths.report_html
    atomic_write_text(path, html)
    return path
