"""pass@k estimator and attempt metrics, checked against numbers computed by hand."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest

from stages.numbers.passk import (
    PassKError,
    attempt_metrics,
    mean_pass_at_k,
    metrics_from_outcomes,
    pass_at_k,
    problem_outcomes,
    unresolved_outcomes,
)
from stages.storage.artifacts import fingerprint, validate
from stages.storage.json_values import JSONObject

# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------


def step(step_id: str, status: str) -> dict[str, Any]:
    return {
        "step_id": step_id,
        "status": status,
        "correct": status == "pass",
        "tests": {"total": 1, "passed": int(status == "pass")},
        "returncode": 0 if status == "pass" else 1,
        "stdout": "",
        "stderr": "",
        "duration_s": 0.1,
        "reason": "",
    }


def attempt(problem_id: str, statuses: dict[str, str], error: str | None = None) -> dict[str, Any]:
    steps = [step(step_id, status) for step_id, status in statuses.items()]
    scored = [s for s in steps if s["status"] != "skipped"]
    passed = sum(s["status"] == "pass" for s in scored)
    correct = error is None and passed == len(scored)
    return {
        "final_answer": {"step_codes": {}},
        "artifacts": {"step_codes": {}},
        "trajectory": [],
        "correct": correct,
        "score": passed / len(scored) if scored else 0.0,
        "meta": {
            "evaluation": {
                "problem_id": problem_id,
                "problem_correct": correct,
                "total_correct": passed,
                "total_steps": len(scored),
                "subproblem_correctness": [s["status"] == "pass" for s in scored],
                "steps": steps,
                "error": error,
            }
        },
    }


def details(problem_id: str, *attempts: dict[str, Any], status: str = "complete") -> dict[str, Any]:
    record: JSONObject = {
        "schema_version": 1,
        "fingerprint": fingerprint(problem_id),
        "status": status,
        "task_id": problem_id,
        "category": "unclassified",
        "attempts": list(attempts),
    }
    validate("details", record)
    return record


def three_problems() -> list[dict[str, Any]]:
    """Whole-problem outcomes per attempt: P1 [T, F, T], P2 [F, F, F], P3 [T, T, T]."""
    p1 = details(
        "1",
        attempt("1", {"1.1": "pass", "1.2": "pass", "1.3": "skipped"}),
        attempt("1", {"1.1": "pass", "1.2": "fail", "1.3": "skipped"}),
        attempt("1", {"1.1": "pass", "1.2": "pass", "1.3": "skipped"}),
    )
    p2 = details(
        "2",
        attempt("2", {"2.1": "fail", "2.2": "pass", "2.3": "pass"}),
        attempt("2", {"2.1": "timeout", "2.2": "fail", "2.3": "pass"}),
        # every step passes, but generation reported an error: not resolved
        attempt("2", {"2.1": "pass", "2.2": "pass", "2.3": "pass"}, error="generation stopped: HTTP 500"),
    )
    p3 = details(
        "3",
        attempt("3", {"3.1": "pass"}),
        attempt("3", {"3.1": "pass"}),
        attempt("3", {"3.1": "pass"}),
    )
    return [p1, p2, p3]


# ---------------------------------------------------------------------------
# The estimator
# ---------------------------------------------------------------------------


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (3, 2, 1, 2 / 3),
        (3, 2, 2, 1.0),  # 1 - C(1,2)/C(3,2) = 1 - 0/3
        (3, 0, 2, 0.0),
        (3, 3, 3, 1.0),
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (10, 3, 5, 11 / 12),  # 1 - C(7,5)/C(10,5) = 1 - 21/252
        (1, 1, 1, 1.0),
        (1, 0, 1, 0.0),
    ],
)
def test_pass_at_k_hand_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_stable_for_large_n() -> None:
    # C(200, 100) ~ 9e58: the product form stays exact to float precision
    for c in (0, 1, 10, 57, 100, 150, 200):
        for k in (1, 2, 17, 100, 200):
            assert pass_at_k(200, c, k) == pytest.approx(float(exact_pass_at_k(200, c, k)), abs=1e-12)


@pytest.mark.parametrize(
    ("n", "c", "k", "message"),
    [
        (3, 2, 4, "k must be between 1 and n=3, got k=4"),
        (3, 2, 0, "k must be between 1 and n=3, got k=0"),
        (3, 4, 1, "c (correct attempts) must be between 0 and n=3, got c=4"),
        (3, -1, 1, "got c=-1"),
        (0, 0, 1, "n (attempts) must be >= 1, got n=0"),
        (3, 1.0, 1, "c must be a whole number, got 1.0"),
        (True, 1, 1, "n must be a whole number, got True"),
    ],
)
def test_pass_at_k_rejects_bad_input(n: Any, c: Any, k: Any, message: str) -> None:
    with pytest.raises(PassKError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_averages_problems_and_refuses_none() -> None:
    assert mean_pass_at_k([(3, 2), (3, 0), (3, 3)], 1) == pytest.approx((2 / 3 + 0 + 1) / 3)
    with pytest.raises(PassKError, match="no problems"):
        mean_pass_at_k([], 1)
    with pytest.raises(PassKError, match="k must be between 1 and n=2, got k=3"):
        mean_pass_at_k([(3, 1), (2, 1)], 3)


# ---------------------------------------------------------------------------
# Attempt metrics
# ---------------------------------------------------------------------------


def test_attempt_metrics_by_hand() -> None:
    metrics = attempt_metrics(three_problems())
    assert metrics["problems"] == 3 and metrics["attempts"] == 3

    # pass@k from whole-problem outcomes [T,F,T], [F,F,F], [T,T,T]
    assert metrics["pass_at_k"]["1"] == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert metrics["pass_at_k"]["2"] == pytest.approx((1 + 0 + 1) / 3)
    assert metrics["pass_at_k"]["3"] == pytest.approx((1 + 0 + 1) / 3)
    assert set(metrics["pass_at_k"]) == {"1", "2", "3"}

    # resolved per attempt: 2, 1, 2 of 3 -> mean 5/9 (= pass@1)
    assert [row["main_problem_resolved"] for row in metrics["per_attempt"]] == [2, 1, 2]
    assert all(row["main_problem_total"] == 3 for row in metrics["per_attempt"])
    assert metrics["mean_main_problem_resolve_rate"] == pytest.approx(5 / 9)

    # scored steps: 2 + 3 + 1 = 6 (the skipped step is out of every denominator)
    # attempt 0: 2+2+1 = 5; attempt 1: 1+1+1 = 3; attempt 2: 2+3+1 = 6 -> mean (5/6 + 3/6 + 6/6) / 3 = 7/9
    assert [row["subproblem_correct"] for row in metrics["per_attempt"]] == [5, 3, 6]
    assert all(row["subproblem_total"] == 6 for row in metrics["per_attempt"])
    assert metrics["mean_subproblem_rate"] == pytest.approx(7 / 9)

    # strategy pass: P1 and P3 resolved by some attempt; every step passed in some attempt
    assert metrics["any_attempt"]["main_problem_resolved"] == 2
    assert metrics["any_attempt"]["main_problem_resolve_rate"] == pytest.approx(2 / 3)
    assert metrics["any_attempt"]["subproblem_correct"] == 6
    assert metrics["strategies"]["avg"] == {
        "main_problem_resolve_rate": pytest.approx(5 / 9),
        "subproblem": pytest.approx(7 / 9),
    }
    assert metrics["strategies"]["pass"] == {
        "main_problem_resolve_rate": pytest.approx(2 / 3),
        "subproblem": pytest.approx(1.0),
    }


def test_pass_at_k_is_not_a_product_of_step_rates() -> None:
    # each of the two steps passes in half the attempts, but never both in the same attempt
    record = details(
        "5",
        attempt("5", {"5.1": "pass", "5.2": "fail"}),
        attempt("5", {"5.1": "fail", "5.2": "pass"}),
    )
    metrics = attempt_metrics([record])
    assert metrics["pass_at_k"] == {"1": 0.0, "2": 0.0}
    assert metrics["mean_subproblem_rate"] == pytest.approx(0.5)
    assert metrics["any_attempt"]["subproblem_correct"] == 2
    assert metrics["any_attempt"]["main_problem_resolved"] == 0


def test_single_attempt_record_level_generation_error_is_unresolved() -> None:
    record = details("7", attempt("7", {"7.1": "pass"}), status="generation_error")
    outcomes = problem_outcomes(record)
    assert outcomes.c == 0 and outcomes.passed_count(0) == 1


def test_selection_denominator_overrides_a_short_details_file() -> None:
    # the details file lists 2 passing steps; the selection says the problem has 3 scored steps
    record = details("8", attempt("8", {"8.1": "pass", "8.2": "pass"}))
    assert attempt_metrics([record])["pass_at_k"]["1"] == 1.0
    metrics = attempt_metrics([record], scored_steps={"8": 3})
    assert metrics["pass_at_k"]["1"] == 0.0
    assert metrics["per_attempt"][0]["subproblem_correct"] == 2
    assert metrics["per_attempt"][0]["subproblem_total"] == 3


def test_missing_problems_count_as_unresolved() -> None:
    outcomes = [problem_outcomes(record) for record in three_problems()]
    outcomes.append(unresolved_outcomes("4", scored_steps=4, attempts=3))
    metrics = metrics_from_outcomes(outcomes)
    assert metrics["problems"] == 4
    assert metrics["pass_at_k"]["1"] == pytest.approx((2 / 3 + 0 + 1 + 0) / 4)
    assert [row["subproblem_total"] for row in metrics["per_attempt"]] == [10, 10, 10]
    assert metrics["any_attempt"]["main_problem_resolve_rate"] == pytest.approx(2 / 4)


def test_different_attempt_counts_are_refused() -> None:
    one = details("1", attempt("1", {"1.1": "pass"}))
    two = details("2", attempt("2", {"2.1": "pass"}), attempt("2", {"2.1": "pass"}))
    with pytest.raises(PassKError, match="problem 1 has 1, problem 2 has 2"):
        attempt_metrics([one, two])


def test_no_problems_is_refused() -> None:
    with pytest.raises(PassKError, match="no problems"):
        attempt_metrics([])
