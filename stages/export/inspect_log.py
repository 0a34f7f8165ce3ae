"""An inspect_ai evaluation log of a run, in inspect_ai's JSON log format (version 2), written without it.

One sample per problem and attempt (inspect's epochs are our attempts): its `input` is the prompt of the
problem's first step, its `messages` every step's conversation in order, its scores

- `steps`: a mapping of step id to status (pass, fail, timeout, parse_error, eval_error, skipped, not_generated,
  no_verdict: `stages.records.status_glossary`);
- `main_problem_resolved`: 1 when the attempt resolved the problem, else 0 (the rule of `stages.records.results`);
- `subproblem`: the fraction of the problem's scored steps that passed (the log's `mean` of it is the mean of
  these values; the summary's step rate, passed over scored steps of all problems, is its `micro_rate`);

and its metadata the problem's field, subfield, split, state, error and each step's reason and test duration (and
under `environments=` its verdict in each grading environment).
The log's results hold attempt 1's headline numbers with their 95% intervals (stages.numbers.uncertainty), the same as
summary.json. The log is marked untrusted (`viewer.trust_content: false`): inspect's viewer shows the model's
text as plain text. The file is named `<created>_scicode_<id>.json`, as inspect names its own logs, so that
`inspect view` lists it; `created` is when the run started.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

from stages.benchmark.datasets import dataset_named, dataset_names
from stages.execution.untrusted import valid_text
from stages.export.steps import environments_cell
from stages.numbers.pricing import Prices, cost_of, prices_of
from stages.numbers.rows import ProblemRow, cell_status, ungenerated_steps
from stages.numbers.uncertainty.intervals import (
    RESOLVE_DESCRIPTION,
    STEP_DESCRIPTION,
    ProblemTally,
    headline_intervals,
)
from stages.records.results import GeneratedStep, ProblemResult, RunResults
from stages.records.usage import Usage
from stages.storage.artifacts import fingerprint
from stages.storage.json_values import JSONObject, JSONValue

LOG_VERSION = 2
TASK = "scicode"
MAX_DEPTH = 32  # deeper values (from a model's tool arguments, say) are kept as their text


def iso(timestamp: str | None) -> str:
    """`2025-01-02T03:04:05Z` (or None: now) as inspect writes times: `2025-01-02T03:04:05+00:00`."""
    if not timestamp:
        return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+00:00")
    return timestamp.replace("Z", "+00:00")


def log_id(run: RunResults) -> str:
    """A stable 22-character id of the run (its folder and selection)."""
    return fingerprint([run.run_dir.parent.name, run.run_dir.name, run.selection.fingerprint])[:22]


def log_file_name(run: RunResults, created: str) -> str:
    stamp = created.replace(":", "-")
    return f"{stamp}_{TASK}_{log_id(run)}.json"


# ---------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------


def plain(value: object, depth: int = 0) -> JSONValue:
    """`value` as JSON-native data every writer accepts: texts made valid, mapping keys made texts, numbers that
    JSON cannot hold (NaN, infinities) and anything else as text, nesting deeper than MAX_DEPTH as text."""
    if value is None or isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, str):
        return valid_text(value)
    if depth >= MAX_DEPTH:
        return valid_text(f"<{type(value).__name__} nested deeper than {MAX_DEPTH} levels>")
    if isinstance(value, Mapping):
        return {valid_text(key): plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item, depth + 1) for item in value]
    return valid_text(value)


def plain_record(record: JSONObject) -> JSONObject:
    """A record (a mapping of texts) made `plain`, field by field."""
    return {valid_text(key): plain(item, 1) for key, item in record.items()}


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return valid_text(value)
    return json.dumps(plain(value), ensure_ascii=False)


def _arguments(raw: JSONValue) -> tuple[JSONObject, str | None]:
    """A tool call's arguments as a mapping, and the parse error when they are not a JSON object."""
    if isinstance(raw, dict):
        return plain_record(raw), None
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else None
    except (ValueError, RecursionError) as error:
        return {"raw": _text(raw)}, f"arguments are not JSON: {type(error).__name__}"
    if isinstance(parsed, dict):
        return plain_record(parsed), None
    return {"raw": _text(raw)}, "arguments are not a JSON object"


def _objects(value: JSONValue) -> list[JSONObject]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _tool_call(call: JSONObject) -> JSONObject:
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    arguments, error = _arguments(function.get("arguments", ""))
    record: JSONObject = {
        "id": _text(call.get("id")),
        "function": _text(function.get("name")),
        "arguments": arguments,
        "type": "function",
    }
    if error:
        record["parse_error"] = error
    return record


def chat_message(message: JSONObject, step_id: str, model: str) -> JSONObject | None:
    """A trajectory message (OpenAI chat layout) as an inspect ChatMessage; None for an unknown role."""
    role = message.get("role")
    metadata: JSONObject = {"step_id": step_id}
    if role in ("system", "user", "developer"):
        return {
            "role": "system" if role == "developer" else role,
            "content": _text(message.get("content")),
            "metadata": metadata,
        }
    if role == "assistant":
        reasoning = message.get("reasoning")
        content: JSONValue = _text(message.get("content"))
        if isinstance(reasoning, str) and reasoning:  # inspect's reasoning block, then the answer's text
            content = [{"type": "reasoning", "reasoning": _text(reasoning)}, {"type": "text", "text": content}]
        record: JSONObject = {
            "role": "assistant",
            "content": content,
            "source": "generate",
            "model": model,
            "metadata": metadata,
        }
        calls: list[JSONValue] = [_tool_call(call) for call in _objects(message.get("tool_calls"))]
        if calls:
            record["tool_calls"] = calls
        return record
    if role == "tool":
        return {
            "role": "tool",
            "content": _text(message.get("content")),
            "tool_call_id": _text(message.get("tool_call_id")),
            "function": _text(message.get("name")) or None,
            "metadata": metadata,
        }
    return None


def step_messages(step: GeneratedStep, model: str) -> list[JSONObject]:
    found = [chat_message(message, step.step_id, model) for message in step.messages]
    return [message for message in found if message is not None]


# ---------------------------------------------------------------------------
# Samples
# ---------------------------------------------------------------------------


def model_usage(usage: Usage | None, prices: Prices | None = None) -> JSONObject:
    """Our usage in inspect's terms (its input_tokens exclude the cached ones), with its `total_cost` where the
    run has prices."""
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    record: JSONObject = {
        "input_tokens": usage.input_tokens - usage.cached_input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }
    if usage.cached_input_tokens:
        record["input_tokens_cache_read"] = usage.cached_input_tokens
    cost = cost_of(usage, prices)
    if cost is not None:
        record["total_cost"] = round(cost, 6)
    return record


def _environment_verdicts(result: ProblemResult, attempt: int) -> dict[str, str]:
    """Under `environments=`: each step's verdict per grading environment (`2024-era=pass;current=fail`)."""
    scored = result.scored_attempt(attempt)
    verdicts = (scored.verdict(step.step_id) for step in result.entry.layout) if scored else ()
    return {verdict.step_id: environments_cell(verdict) for verdict in verdicts if verdict and verdict.environments}


def _statuses(result: ProblemResult, attempt: int) -> list[tuple[str, str, str, float | None]]:
    """(step id, status, reason, test duration) of every step of the problem in this attempt."""
    scored = result.scored_attempt(attempt)
    ungenerated = ungenerated_steps(result, attempt)
    found: list[tuple[str, str, str, float | None]] = []
    for step in result.entry.layout:
        verdict = scored.verdict(step.step_id) if scored else None
        if verdict is not None:
            status = cell_status(verdict, ungenerated)
            found.append((step.step_id, status, valid_text(verdict.reason), verdict.duration_s))
        elif step.prefilled:
            found.append((step.step_id, "skipped", "official prefilled step", None))
        else:
            found.append((step.step_id, "no_verdict", valid_text(result.missing_reason or "no verdict"), None))
    return found


def step_metadata(step: tuple[str, str, str, float | None], environments: dict[str, str]) -> JSONValue:
    """A step's entry in a sample's metadata: its status, reason and test duration, and under `environments=` its
    verdict in each grading environment."""
    step_id, status, reason, duration = step
    entry: JSONObject = {"step_id": step_id, "status": status, "reason": reason, "test_duration_s": duration}
    if step_id in environments:
        entry["environments"] = environments[step_id]
    return entry


def passed_of_scored(steps: Sequence[tuple[str, str, str, float | None]]) -> tuple[int, int]:
    """The passed and the scored steps (all but skipped ones) of `_statuses`."""
    scored = [status for _, status, _, _ in steps if status != "skipped"]
    return sum(status == "pass" for status in scored), len(scored)


def subproblem_value(passed: int, scored: int) -> float:
    """A sample's `subproblem` score: the fraction of its scored steps that passed (0 without any)."""
    return passed / scored if scored else 0.0


def subproblem_values(run: RunResults, attempt: int = 0) -> list[float]:
    """The `subproblem` score of every sample of one attempt, in sample order."""
    return [
        subproblem_value(*passed_of_scored(_statuses(result, attempt)))
        for result in run.problems
        if attempt < result.attempt_count
    ]


def sample(result: ProblemResult, attempt: int, model: str, prices: Prices | None = None) -> JSONObject:
    generation = result.generation(attempt)
    steps = _statuses(result, attempt)
    environments = _environment_verdicts(result, attempt)
    passed, scored = passed_of_scored(steps)
    messages: list[JSONValue] = [
        message for step in (generation.steps if generation else ()) for message in step_messages(step, model)
    ]
    first_prompt = next((step.prompt for step in (generation.steps if generation else ()) if step.prompt), None)
    last_answer = next(
        (step.raw_answer for step in reversed(generation.steps if generation else ()) if step.raw_answer), None
    )
    cost = result.cost(attempt)
    resolved = result.resolved(attempt)
    explanation = "; ".join(
        f"{step_id} {status}" + (f": {reason}" if reason else "") for step_id, status, reason, _ in steps
    )
    record: JSONObject = {
        "id": result.problem_id,
        "epoch": attempt + 1,
        "input": _text(first_prompt) or f"SciCode problem {result.problem_id}",
        "target": "",
        "messages": messages,
        "output": {
            "model": model,
            "choices": [
                {
                    "message": {"role": "assistant", "content": _text(last_answer), "source": "generate"},
                    "stop_reason": "stop",
                }
            ]
            if last_answer is not None
            else [],
            "completion": _text(last_answer),
        },
        "scores": {
            "steps": {"value": {step_id: status for step_id, status, _, _ in steps}, "explanation": explanation},
            "main_problem_resolved": {
                "value": 1 if resolved else 0,
                "answer": "resolved" if resolved else "unresolved",
            },
            "subproblem": {"value": subproblem_value(passed, scored), "answer": f"{passed}/{scored}"},
        },
        "metadata": {
            "field": result.entry.taxonomy.field,
            "subfield": result.entry.taxonomy.subfield,
            "split": result.entry.split,
            "state": result.state,
            "error": _text(generation.error) if generation and generation.error else None,
            "steps": [step_metadata(step, environments) for step in steps],
        },
        "model_usage": {model: model_usage(cost.usage, prices)},
    }
    if cost.latency_s is not None:
        record["total_time"] = round(cost.latency_s + sum(duration or 0.0 for *_, duration in steps), 3)
    return record


# ---------------------------------------------------------------------------
# The log
# ---------------------------------------------------------------------------


def _metric(name: str, value: float | None) -> JSONObject:
    return {} if value is None else {name: {"name": name, "value": value, "params": {}}}


def results_record(rows: Sequence[ProblemRow], samples: int, subproblem_scores: Sequence[float]) -> JSONObject:
    """Attempt 1's headline numbers, as inspect scores with metrics (the intervals as ci_low / ci_high). The
    `subproblem` score's `mean` is the mean of attempt 1's sample values (`subproblem_scores`), as inspect's own
    `mean` would be; the summary's step rate (passed over scored steps of all problems) is `micro_rate`, with its
    own clustered stderr and interval."""
    intervals = headline_intervals([ProblemTally(row.resolved, row.steps_passed, row.steps_scored) for row in rows])
    resolve, steps = intervals.resolve, intervals.steps
    resolve_metrics: JSONObject = {
        **_metric("accuracy", resolve.rate),
        **_metric("ci_low", resolve.interval.low if resolve.interval else None),
        **_metric("ci_high", resolve.interval.high if resolve.interval else None),
    }
    step_metrics: JSONObject = {
        **_metric("mean", sum(subproblem_scores) / len(subproblem_scores) if subproblem_scores else None),
        **_metric("micro_rate", steps.rate),
        **_metric("micro_rate_stderr", steps.se),
        **_metric("micro_rate_ci_low", steps.interval.low if steps.interval else None),
        **_metric("micro_rate_ci_high", steps.interval.high if steps.interval else None),
    }
    return {
        "total_samples": samples,
        "completed_samples": samples,
        "scores": [
            {
                "name": "main_problem_resolved",
                "scorer": "main_problem_resolved",
                "scored_samples": len(rows),
                "unscored_samples": 0,
                "params": {},
                "metrics": resolve_metrics,
                "metadata": {"attempt": 1, "interval": f"95% {RESOLVE_DESCRIPTION}"},
            },
            {
                "name": "subproblem",
                "scorer": "subproblem",
                "scored_samples": len(rows),
                "unscored_samples": 0,
                "params": {},
                "metrics": step_metrics,
                "metadata": {
                    "attempt": 1,
                    "mean": "mean of the samples' subproblem values (each problem weighs the same)",
                    "micro_rate": "passed / scored steps of all problems (the summary's steps figure)",
                    "micro_rate_stderr": "clustered by problem",
                    "interval": f"95% {STEP_DESCRIPTION}",
                    "effective_n": steps.size.effective if steps.size else None,
                },
            },
            {
                "name": "steps",
                "scorer": "steps",
                "params": {},
                "metrics": {},
                "metadata": {"value": "step id -> status"},
            },
        ],
        "headline": {"scorer": "main_problem_resolved", "score": "main_problem_resolved", "metric": "accuracy"},
    }


def _display_name(dataset: str) -> str:
    """The dataset's name in the log (a dataset this version does not describe: its name as recorded)."""
    return dataset_named(dataset).display_name if dataset in dataset_names() else dataset


def eval_log(
    run: RunResults,
    rows: Sequence[ProblemRow],
    *,
    model: str,
    created: str,
    completed: str,
    project: Mapping[str, JSONValue],
    caveats: Sequence[str] = (),
    published: JSONObject | None = None,
) -> JSONObject:
    """The whole log of the run as inspect_ai's JSON log (a JSON-native mapping); `caveats` and `published` (the
    summary's caveats and its published-setting record) are in the eval's metadata beside the headline's results."""
    settings = run.settings
    attempts = max((result.attempt_count for result in run.problems), default=1)
    samples: list[JSONValue] = [
        sample(result, attempt, model, prices_of(settings))
        for attempt in range(attempts)
        for result in run.problems
        if attempt < result.attempt_count
    ]
    usage = sum((cost.usage or Usage() for result in run.problems for cost in result.costs()), Usage())
    identity = log_id(run)
    spec: JSONObject = {
        "eval_id": identity,
        "run_id": identity,
        "created": created,
        "task": TASK,
        "task_id": identity,
        "task_version": 0,
        "task_display_name": "SciCode",
        "task_attribs": {},
        "task_args": {
            name: settings[name]
            for name in ("dataset", "split", "mode", "with_background", "carry", "category", "sample_ids")
            if name in settings
        },
        "task_args_passed": {},
        "dataset": {
            "name": _display_name(run.selection.dataset),
            "samples": len(run.problems),
            "sample_ids": [result.problem_id for result in run.problems],
            "shuffled": False,
        },
        "model": model,
        "model_args": plain(settings.get("model_params") or {}),
        "config": {"epochs": attempts},
        "packages": {str(project.get("name")): str(project.get("version") or "unknown")},
        "metadata": {
            "run_dir": str(run.run_dir),
            "project": dict(project),
            "confinement": (run.config or {}).get("confinement"),
            "caveats": list(caveats),
            "published_setting": published,
        },
        "viewer": {"trust_content": False},
    }
    if settings.get("base_url"):
        spec["model_base_url"] = settings["base_url"]
    return plain_record(
        {
            "version": LOG_VERSION,
            "status": "success",
            "eval": spec,
            "plan": {
                "name": "plan",
                "steps": [{"solver": "scicode-pipeline", "params": {"mode": settings.get("mode")}}],
                "config": {},
            },
            "results": results_record(rows, len(samples), subproblem_values(run)),
            "stats": {
                "started_at": created,
                "completed_at": completed,
                "model_usage": {model: model_usage(usage, prices_of(settings))},
            },
            "samples": samples,
        }
    )
