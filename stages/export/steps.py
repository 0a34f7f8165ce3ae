"""The flat table of a run's steps: one row per step and attempt, for pandas (JSONL) and spreadsheets (CSV).

Columns: run, model, problem, step, attempt (1-based), status, reason, input/output/total tokens, their cost in
USD at the run's prices (empty without prices) and the model calls of the step's generation, its model latency, the
test duration, the tool calls and their summed duration, field, subfield, split and dataset, and under `environments=` each
grading environment's verdict (`NAME=STATUS` joined by `;`, in the order named; empty otherwise). Every text is
`valid_text`. In the CSV every text cell is quoted (whatever separator
a spreadsheet splits on, a cell stays one cell when it is read as CSV), and no part of a text cell can be read as
a formula: a cell starting with a tab or a carriage return, and every segment a spreadsheet may split off (at the
cell's start and after each `,`, `;`, tab or line break) whose first character past any white space and quotes
(`;"=...` is the quoted field `=...` to a spreadsheet that splits on `;`) is `=`, `+`, `-` or `@`, gets a `'`
before that character. The JSONL keeps every text exactly as recorded (programs read it, not
spreadsheets).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from stages.benchmark.datasets import PREFILLED_REASON
from stages.execution.untrusted import valid_text
from stages.numbers.pricing import Prices, cost_of, prices_of
from stages.numbers.rows import cell_status, ungenerated_steps
from stages.records.results import GeneratedStep, ProblemResult, RunResults
from stages.records.verdict import StepVerdict

FORMULA_GUARD = "'"
CONTROL_STARTS = ("\t", "\r")  # a cell starting with these is read as a formula by some spreadsheets
# A segment a spreadsheet may split off (the cell's start, or after a separator it may split on) that starts, past
# any white space and quotes (a field may be quoted), with a character that makes it a formula.
FORMULA_STARTS = "=+-@"
FORMULA_SEGMENT = re.compile(r"(^|[,;\t\r\n])([\s\"']*)([=+\-@])")


@dataclass(frozen=True)
class StepRow:
    run: str
    model: str
    problem: str
    step: str
    attempt: int
    status: str
    reason: str
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    cost_usd: float | None  # at the run's prices (price_*_per_mtok); empty without prices
    model_calls: int | None
    latency_s: float | None
    test_duration_s: float | None
    tool_calls: int | None
    tool_duration_s: float | None
    field: str
    subfield: str
    split: str
    dataset: str
    environments: str = ""


COLUMNS: tuple[str, ...] = tuple(StepRow.__dataclass_fields__)


def spreadsheet_safe(value: Any) -> Any:
    """A text cell no part of which a spreadsheet runs as a formula (see the module docstring); other values
    unchanged."""
    if not isinstance(value, str):
        return value
    guarded = FORMULA_SEGMENT.sub(lambda match: match.group(1) + match.group(2) + FORMULA_GUARD + match.group(3), value)
    return FORMULA_GUARD + guarded if guarded.startswith(CONTROL_STARTS) else guarded


def _status_and_reason(
    verdict: StepVerdict | None, prefilled: bool, missing_reason: str, ungenerated: frozenset[str]
) -> tuple[str, str]:
    if verdict is not None:
        return cell_status(verdict, ungenerated), verdict.reason
    if prefilled:
        return "skipped", PREFILLED_REASON
    return "no_verdict", missing_reason


def step_row(
    run_label: str,
    model: str,
    result: ProblemResult,
    step_id: str,
    prefilled: bool,
    attempt: int,
    dataset: str,
    prices: Prices | None = None,
) -> StepRow:
    scored = result.scored_attempt(attempt)
    generation = result.generation(attempt)
    verdict = scored.verdict(step_id) if scored else None
    generated: GeneratedStep | None = generation.step(step_id) if generation else None
    missing = result.missing_reason or "no verdict for this attempt"
    status, reason = _status_and_reason(verdict, prefilled, missing, ungenerated_steps(result, attempt))
    usage = generated.usage if generated else None
    entry = result.entry
    return StepRow(
        run=valid_text(run_label),
        model=valid_text(model),
        problem=result.problem_id,
        step=step_id,
        attempt=attempt + 1,
        status=status,
        reason=valid_text(reason),
        input_tokens=usage.input_tokens if usage else None,
        output_tokens=usage.output_tokens if usage else None,
        total_tokens=usage.total_tokens if usage else None,
        cost_usd=_rounded(cost_of(usage, prices)),
        model_calls=generated.model_calls if generated else None,
        latency_s=generated.latency_s if generated else None,
        test_duration_s=verdict.duration_s if verdict else None,
        tool_calls=len(generated.tool_calls) if generated else None,
        tool_duration_s=round(sum(call.duration_s for call in generated.tool_calls), 6) if generated else None,
        field=valid_text(entry.taxonomy.field),
        subfield=valid_text(entry.taxonomy.subfield),
        split=entry.split,
        dataset=dataset,
        environments=environments_cell(verdict),
    )


def environments_cell(verdict: StepVerdict | None) -> str:
    """`2024-era=pass;current=fail`: each grading environment's verdict of the step; "" without environments."""
    return ";".join(f"{entry.name}={entry.status}" for entry in verdict.environments) if verdict else ""


def step_rows(run: RunResults, model: str) -> Iterator[StepRow]:
    """Every step of every selected problem, for each attempt the problem has, in selection order."""
    label = f"{run.run_dir.parent.name}/{run.run_dir.name}"
    prices = prices_of(run.settings)
    for result in run.problems:
        for attempt in range(result.attempt_count):
            for step in result.entry.layout:
                yield step_row(
                    label, model, result, step.step_id, step.prefilled, attempt, run.selection.dataset, prices
                )


def _rounded(cost: float | None) -> float | None:
    return None if cost is None else round(cost, 8)


def csv_text(rows: Iterable[StepRow]) -> str:
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, quoting=csv.QUOTE_NONNUMERIC)  # every text cell quoted; RFC 4180 line ends
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow(["" if value is None else spreadsheet_safe(value) for value in asdict(row).values()])
    return buffer.getvalue()


def jsonl_text(rows: Iterable[StepRow]) -> str:
    return "".join(json.dumps(asdict(row), ensure_ascii=False) + "\n" for row in rows)
