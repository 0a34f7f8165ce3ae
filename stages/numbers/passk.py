"""Scores over several attempts per problem: the unbiased pass@k estimator and per-attempt averages.

A problem is *resolved in attempt j* when generation reported no error in attempt j and every scored
step passed in attempt j. pass@k is estimated from those whole-problem outcomes of the same attempt
(never from a product of step pass rates): with n attempts of which c resolved the problem,

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n-c+1}^{n} (1 - k / i)

(the product form avoids huge binomials), averaged over problems. The two attempt strategies of the
configuration are both reported: `avg` (rates averaged over attempts) and `pass` (a problem counts
resolved when any attempt resolved it; a step counts passed when any attempt passed it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stages.numbers.uncertainty.intervals import Interval, clustered_wilson, pass_at_k_method_record
from stages.records.results import Details, ProblemResult, ScoredAttempt


class PassKError(ValueError):
    """Invalid input to a pass@k computation, stated in one line."""


# ---------------------------------------------------------------------------
# The estimator
# ---------------------------------------------------------------------------


def _require_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PassKError(f"pass@k: {name} must be a whole number, got {value!r}")
    return value


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with `n` attempts of which `c` were correct (1 <= k <= n, 0 <= c <= n)."""
    n, c, k = _require_int("n", n), _require_int("c", c), _require_int("k", k)
    if n < 1:
        raise PassKError(f"pass@k: n (attempts) must be >= 1, got n={n}")
    if not 0 <= c <= n:
        raise PassKError(f"pass@k: c (correct attempts) must be between 0 and n={n}, got c={c}")
    if not 1 <= k <= n:
        raise PassKError(f"pass@k: k must be between 1 and n={n}, got k={k}")
    if n - c < k:
        return 1.0  # every draw of k attempts contains a correct one
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean_pass_at_k(counts: Iterable[tuple[int, int]], k: int) -> float:
    """pass@k averaged over problems, each given as `(n, c)`."""
    values = [pass_at_k(n, c, k) for n, c in counts]
    if not values:
        raise PassKError("pass@k: no problems to average over")
    return math.fsum(values) / len(values)


def pass_at_k_interval(counts: Sequence[tuple[int, int]], k: int) -> Interval:
    """The 95% clustered Wilson interval of mean pass@k over problems, each problem given as (n, c): a problem is
    n // k draws of k attempts, pass@k of them resolving it (stages.numbers.uncertainty.intervals)."""
    found = clustered_wilson([(pass_at_k(n, c, k) * (n // k), n // k) for n, c in counts])
    if found is None:
        raise PassKError("pass@k: no problems to give an interval over")
    return found[0]


def pass_at_k_intervals(counts: Sequence[tuple[int, int]], ks: Sequence[int]) -> dict[int, Interval]:
    """k -> `pass_at_k_interval(counts, k)`."""
    return {k: pass_at_k_interval(counts, k) for k in ks}


# ---------------------------------------------------------------------------
# Outcomes of the attempts of one problem
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptOutcome:
    """One attempt of one problem: whether it resolved the problem, and which scored steps passed."""

    resolved: bool
    passed_steps: frozenset[str]


@dataclass(frozen=True)
class ProblemOutcomes:
    """Every attempt of one problem, with the problem's number of scored steps (its denominator)."""

    problem_id: str
    scored_steps: int
    attempts: tuple[AttemptOutcome, ...]

    @property
    def n(self) -> int:
        return len(self.attempts)

    @property
    def c(self) -> int:
        return sum(attempt.resolved for attempt in self.attempts)

    def passed_count(self, attempt: int) -> int:
        return min(len(self.attempts[attempt].passed_steps), self.scored_steps)

    @property
    def resolved_any(self) -> bool:
        return self.c > 0

    @property
    def passed_any_count(self) -> int:
        union = frozenset().union(*(attempt.passed_steps for attempt in self.attempts))
        return min(len(union), self.scored_steps)


def _attempt_outcome(attempt: ScoredAttempt, scored_steps: int) -> AttemptOutcome:
    return AttemptOutcome(
        resolved=attempt.resolved(scored_steps),
        passed_steps=frozenset(v.step_id for v in attempt.scored_verdicts if v.status == "pass"),
    )


def details_outcomes(details: Details, *, scored_steps: int | None = None) -> ProblemOutcomes:
    """The attempt outcomes of one details record (the resolved rule is `stages.records.results.is_resolved`).

    `scored_steps` is the problem's denominator (from selection.json); without it, the largest
    `total_steps` any attempt's evaluation declares. A record-level generation failure marks the attempt
    failed when the record holds one attempt; with several, each attempt's own `evaluation.error` decides.
    """
    if not details.attempts:
        raise PassKError(f"details of problem {details.task_id} hold no attempts")
    if scored_steps is None:
        scored_steps = max(attempt.declared_total_steps for attempt in details.attempts)
    if scored_steps < 0:
        raise PassKError(f"problem {details.task_id}: scored_steps must be >= 0, got {scored_steps}")
    outcomes = tuple(_attempt_outcome(attempt, scored_steps) for attempt in details.attempts)
    return ProblemOutcomes(problem_id=details.task_id, scored_steps=scored_steps, attempts=outcomes)


def problem_outcomes(details: Mapping[str, Any], *, scored_steps: int | None = None) -> ProblemOutcomes:
    """`details_outcomes` of a details record given as its JSON mapping."""
    return details_outcomes(Details.from_record(details), scored_steps=scored_steps)


def result_outcomes(result: ProblemResult, attempts_if_missing: int) -> ProblemOutcomes:
    """The outcomes of a selected problem of a run: unresolved in every attempt without (valid) details."""
    if result.details is None:
        return unresolved_outcomes(result.problem_id, result.entry.scored_steps, attempts_if_missing)
    return details_outcomes(result.details, scored_steps=result.entry.scored_steps)


def unresolved_outcomes(problem_id: str, scored_steps: int, attempts: int) -> ProblemOutcomes:
    """A selected problem with no (valid) details: unresolved in every attempt, no step passed."""
    if attempts < 1:
        raise PassKError(f"problem {problem_id}: attempts must be >= 1, got {attempts}")
    failed = AttemptOutcome(resolved=False, passed_steps=frozenset())
    return ProblemOutcomes(problem_id=problem_id, scored_steps=scored_steps, attempts=(failed,) * attempts)


# ---------------------------------------------------------------------------
# Aggregates over problems
# ---------------------------------------------------------------------------


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _mean(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return math.fsum(present) / len(present) if present else None


def _common_attempt_count(outcomes: Sequence[ProblemOutcomes]) -> int:
    if not outcomes:
        raise PassKError("attempt metrics: no problems given")
    n = outcomes[0].n
    odd = next((problem for problem in outcomes if problem.n != n), None)
    if odd is not None:
        raise PassKError(
            f"attempt metrics need the same number of attempts for every problem: "
            f"problem {outcomes[0].problem_id} has {n}, problem {odd.problem_id} has {odd.n}"
        )
    return n


def _counts_row(outcomes: Sequence[ProblemOutcomes], resolved: int, correct: int) -> dict[str, Any]:
    """Resolved problems and passed steps over all of `outcomes`, with both rates."""
    total = sum(problem.scored_steps for problem in outcomes)
    return {
        "main_problem_resolved": resolved,
        "main_problem_total": len(outcomes),
        "main_problem_resolve_rate": _rate(resolved, len(outcomes)),
        "subproblem_correct": correct,
        "subproblem_total": total,
        "subproblem": _rate(correct, total),
    }


def _attempt_row(outcomes: Sequence[ProblemOutcomes], attempt: int) -> dict[str, Any]:
    resolved = sum(problem.attempts[attempt].resolved for problem in outcomes)
    correct = sum(problem.passed_count(attempt) for problem in outcomes)
    return {"attempt": attempt, **_counts_row(outcomes, resolved, correct)}


def _any_attempt_row(outcomes: Sequence[ProblemOutcomes]) -> dict[str, Any]:
    resolved = sum(problem.resolved_any for problem in outcomes)
    correct = sum(problem.passed_any_count for problem in outcomes)
    return _counts_row(outcomes, resolved, correct)


def metrics_from_outcomes(outcomes: Sequence[ProblemOutcomes]) -> dict[str, Any]:
    """Attempt metrics of problems that all have the same number of attempts n (JSON-native dict).

    - `per_attempt[j]`: resolve rate and micro-averaged subproblem rate of attempt j;
    - `mean_main_problem_resolve_rate`, `mean_subproblem_rate`: those averaged over attempts (strategy avg);
    - `pass_at_k["k"]` for k = 1..n, from whole-problem outcomes, and `pass_at_k_intervals["k"]` their 95%
      clustered Wilson intervals over problems (the method under `interval_method`, stages.numbers.uncertainty.intervals);
    - `any_attempt`: resolved when any attempt resolved it, step passed when any attempt passed it (strategy pass);
    - `strategies`: the headline pair under each attempt strategy name.
    """
    outcomes = list(outcomes)
    n = _common_attempt_count(outcomes)
    per_attempt = [_attempt_row(outcomes, attempt) for attempt in range(n)]
    any_attempt = _any_attempt_row(outcomes)
    mean_resolve = _mean([row["main_problem_resolve_rate"] for row in per_attempt])
    mean_subproblem = _mean([row["subproblem"] for row in per_attempt])
    counts = [(problem.n, problem.c) for problem in outcomes]
    ks = list(range(1, n + 1))
    intervals = pass_at_k_intervals(counts, ks)
    return {
        "problems": len(outcomes),
        "attempts": n,
        "per_attempt": per_attempt,
        "mean_main_problem_resolve_rate": mean_resolve,
        "mean_subproblem_rate": mean_subproblem,
        "pass_at_k": {str(k): mean_pass_at_k(counts, k) for k in ks},
        "pass_at_k_intervals": {str(k): intervals[k].to_record() for k in ks},
        "interval_method": pass_at_k_method_record(),
        "any_attempt": any_attempt,
        "strategies": {
            "avg": {"main_problem_resolve_rate": mean_resolve, "subproblem": mean_subproblem},
            "pass": {
                "main_problem_resolve_rate": any_attempt["main_problem_resolve_rate"],
                "subproblem": any_attempt["subproblem"],
            },
        },
    }


def attempt_metrics(
    details_records: Iterable[Mapping[str, Any]], *, scored_steps: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """Attempt metrics of details records (each with attempts[0..n-1]); see `metrics_from_outcomes`.

    `scored_steps` maps problem id -> its number of scored steps (selection.json); problems not in it
    use the `total_steps` their evaluations declare.
    """
    denominators = scored_steps or {}
    outcomes = [
        problem_outcomes(record, scored_steps=denominators.get(str(record.get("task_id"))))
        for record in details_records
    ]
    return metrics_from_outcomes(outcomes)
