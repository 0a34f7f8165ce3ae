"""The verdicts decided without a judgement of the test process (`stages.score.checker.verdict_rules`): before running
from the generation record, and the evaluation errors of a step the trusted side could not run. Their reasons are
what details files, summaries and the golden files hold: the texts below are pinned as they were written before the
rules were gathered in one module."""

from __future__ import annotations

import pytest

from stages.benchmark.datasets import PREFILLED_REASON
from stages.benchmark.problems import Step
from stages.records.generation import GeneratedStep, Generation
from stages.records.verdict import StepVerdict
from stages.score.checker import verdict_rules
from stages.score.checker.verdict_rules import (
    RULES,
    Rule,
    SessionLog,
    SessionOutput,
    judged_verdict,
    not_started,
    not_submitted,
    retried_after_worker_loss,
    targets_missing,
    targets_unreadable,
    unprepared_tests,
    verdict_before_running,
    verdict_over_environments,
    worker_failed,
    worker_unfit,
    workers_lost,
)
from stages.statuses import StepStatus
from stages.storage.json_values import JSONObject, freeze_object

TESTS = ("assert f(1) == 1", "assert f(2) == 2", "assert f(3) == 3")


def _step(prefilled_file: str = "") -> Step:
    return Step("19.2", 1, "", "", "def f(x):", "return x", TESTS, None, prefilled_file)


def _generated(status: str, code: str | None = None, **fields: str | None) -> GeneratedStep:
    record: JSONObject = {"step_id": "19.2", "status": status, "code": code, **fields}
    return GeneratedStep.from_record(freeze_object(record))


def _generation(*steps: GeneratedStep, error: str | None = None) -> Generation:
    records: list[JSONObject] = [{"step_id": step.step_id, "status": step.status} for step in steps]
    return Generation.from_record(freeze_object({"steps": list(records), "error": error}))


def _reason(verdict: StepVerdict | None) -> tuple[str, str, int] | None:
    return None if verdict is None else (verdict.status, verdict.reason, verdict.tests_total)


CODE = "def f(x):\n    return x\n"


@pytest.mark.parametrize(
    ("step", "generation", "record", "expected"),
    [
        (_step("19.2.txt"), None, None, ("skipped", PREFILLED_REASON, 3)),
        (_step(), None, None, ("fail", "not generated: no generation file", 3)),
        (_step(), _generation(error="HTTP 500"), None, ("fail", "not generated: HTTP 500", 3)),
        (_step(), _generation(), None, ("fail", "not generated: generation stopped before this step", 3)),
        (
            _step(),
            _generation(error="HTTP 500"),
            _generated("error", error="API failed"),
            ("fail", "not generated: API failed", 3),
        ),
        (
            _step(),
            _generation(),
            _generated("context_exceeded", error="the prompt did not fit"),
            ("fail", "the prompt did not fit", 3),
        ),
        (_step(), _generation(), _generated("not_generated"), ("fail", "not_generated", 3)),
        (
            _step(),
            _generation(),
            _generated("truncated", raw_answer="def f(x):"),
            (
                "parse_error",
                "no code in the answer (truncated): no fenced code block, nor Python that defines the step's name",
                3,
            ),
        ),
        (
            _step(),
            _generation(),
            _generated("ok", "  \n", raw_answer="```python\n```"),
            (
                "parse_error",
                "no code in the answer (no_code): its code block is empty (a lone closing fence starts an empty block)",
                3,
            ),
        ),
        (_step(), _generation(), _generated("ok", CODE), None),
        (_step(), _generation(), _generated("truncated", CODE), None),
    ],
    ids=[
        "prefilled",
        "no generation file",
        "generation error",
        "generation stopped",
        "step error",
        "context exceeded",
        "never asked",
        "truncated without code",
        "blank code",
        "code",
        "truncated with code",
    ],
)
def test_the_verdict_before_running_is_decided_from_the_generation_record(
    step: Step, generation: Generation | None, record: GeneratedStep | None, expected: tuple[str, str, int] | None
) -> None:
    assert _reason(verdict_before_running(step, generation, record)) == expected


@pytest.mark.parametrize(
    ("verdict", "reason"),
    [
        (
            targets_missing("19.2", 3, "official targets not downloaded"),
            "targets missing: official targets not downloaded",
        ),
        (unprepared_tests("19.2", 3, "line 1: invalid syntax"), "cannot prepare the tests: line 1: invalid syntax"),
        (targets_unreadable("19.2", 3, "targets file t.h5: no group 19.2"), "targets file t.h5: no group 19.2"),
        (not_started("19.2", 3, "no such interpreter"), "could not start the test process: no such interpreter"),
        (worker_unfit("19.2", 3, "tcp://w:1", "numpy 2 here"), "on dask worker tcp://w:1: numpy 2 here"),
        (not_submitted("19.2", 3, "client closed"), "cannot submit to the dask scheduler: client closed"),
        (
            worker_failed("19.2", 3, ValueError("bad frame")),
            "the dask worker could not run the step: ValueError: bad frame",
        ),
        (
            workers_lost("19.2", 3, ["tcp://a:1", "tcp://b:2"]),
            "the dask workers running this step died 2 times (tcp://a:1, tcp://b:2); not retried again",
        ),
    ],
    ids=[
        "targets missing",
        "tests not prepared",
        "targets unreadable",
        "not started",
        "worker unfit",
        "not submitted",
        "worker failed",
        "workers lost",
    ],
)
def test_a_step_the_trusted_side_could_not_run_is_an_eval_error_with_its_reason(
    verdict: StepVerdict, reason: str
) -> None:
    assert (verdict.step_id, verdict.status, verdict.reason, verdict.tests_total) == ("19.2", "eval_error", reason, 3)
    assert verdict.executed_on == ("tcp://w:1" if reason.startswith("on dask worker") else "")


def test_a_fact_is_inserted_as_it_is_never_read_as_a_template() -> None:
    """An error text from a server or an exception, braces and all, is the reason as it was (a template reading it
    would raise or substitute)."""
    hostile = "{detail} {0} {error!r:>9} {"
    assert targets_missing("1.1", 1, hostile).reason == f"targets missing: {hostile}"
    assert unprepared_tests("1.1", 1, hostile).reason == f"cannot prepare the tests: {hostile}"
    assert worker_failed("1.1", 1, KeyError(hostile)).reason.endswith(f"KeyError: {KeyError(hostile)}")
    for record, reason in (
        (_generated("error", error=hostile), f"not generated: {hostile}"),
        (_generated("context_exceeded", error=hostile), hostile),
    ):
        assert _reason(verdict_before_running(_step(), _generation(record), record)) == ("fail", reason, 3)


def test_a_step_retried_after_worker_loss_says_so_and_keeps_its_verdict() -> None:
    verdict = StepVerdict("19.2", "pass", "all 3 tests passed", tests_total=3, tests_passed=3, duration_s=1.5)
    again = retried_after_worker_loss(verdict, ["tcp://a:1"], "tcp://b:2")
    assert again.reason == (
        "all 3 tests passed; retried after worker loss (dask worker tcp://a:1 died during the step; re-run on tcp://b:2)"
    )
    assert (again.status, again.tests_passed, again.duration_s) == ("pass", 3, 1.5)
    unknown = retried_after_worker_loss(verdict, ["tcp://a:1", "tcp://c:3"], None)
    assert unknown.reason.endswith("(dask worker tcp://a:1, tcp://c:3 died during the step)")


def test_the_verdict_of_an_execution_carries_what_the_engine_collected() -> None:
    log = SessionLog(total=2, forwarded=[0, 1], results={0: (True, "ok"), 1: (True, "ok")}, complete=True)
    output = SessionOutput("out \udcff", "err", 2.5, "zygote")
    verdict = judged_verdict("19.2", log, 0, 60.0, output)
    assert (verdict.status, verdict.reason, verdict.tests_total, verdict.tests_passed) == (
        "pass",
        "all 2 tests passed",
        2,
        2,
    )
    assert (verdict.stdout, verdict.stderr, verdict.duration_s, verdict.launch_mode) == (
        "out \ufffd",
        "err",
        2.5,
        "zygote",
    )
    compared: JSONObject = {"statement": "assert f(2) == 2"}
    failed = SessionLog(total=2, forwarded=[0, 1], results={0: (True, "ok"), 1: (False, "test 2: 3 != 2")})
    failed.compared[1] = compared
    verdict = judged_verdict("19.2", failed, 1, 60.0, output)
    assert (verdict.status, verdict.reason, verdict.compared) == ("fail", "test 2: 3 != 2", compared)


def _ran(status: StepStatus, reason: str, cached: bool = False) -> StepVerdict:
    return StepVerdict("19.2", status, reason, tests_total=3, cached=cached, duration_s=1.0)


def test_a_step_over_grading_environments_takes_the_first_pass_and_keeps_each_verdict() -> None:
    failed, passed = _ran("fail", "test 2: 3 != 2"), _ran("pass", "all 3 tests passed", cached=True)
    verdict = verdict_over_environments(("2024", "2025", "2026"), {1: passed, 0: failed})
    assert (verdict.status, verdict.reason, verdict.cached) == ("pass", "all 3 tests passed", True)
    assert [(kept.name, kept.status, kept.cached) for kept in verdict.environments] == [
        ("2024", "fail", False),
        ("2025", "pass", True),
    ]
    none_passed = verdict_over_environments(("2024", "2025"), {1: _ran("timeout", "late"), 0: failed})
    assert (none_passed.status, none_passed.reason) == ("fail", "test 2: 3 != 2")
    assert verdict_over_environments(("",), {0: failed}) is failed  # python_binary alone: the verdict as it was


def test_every_rule_is_declared_once_in_the_table() -> None:
    declared = [value for value in vars(verdict_rules).values() if isinstance(value, Rule)]
    assert len(declared) == len(RULES) and set(declared) == set(RULES)
    assert len({rule.reason for rule in RULES}) == len(RULES)
