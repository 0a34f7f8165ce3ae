"""The schema files are generated from the record declarations (`python -m scripts.schema_files`), beside the
configuration page's staleness test: every generated file equals the committed one, every golden artifact of a
generated kind validates, and what the hand-written schemas refused is still refused."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scripts.schema_files import COMMAND, GENERATED, HAND_KEPT, schema_file_name, schema_text, stale_files
from stages.errors import PipelineError
from stages.records import not_generated, not_scored
from stages.storage.artifacts import ArtifactError, validate
from stages.storage.paths import SCHEMAS_DIR, RunPaths

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GOLDEN = PROJECT_ROOT / "tests" / "golden"
ARTIFACT_KINDS = sorted(kind for kind in GENERATED if kind != "common")
DELETE = object()  # a mutation that removes the key


@pytest.mark.parametrize("kind", sorted(GENERATED))
def test_the_committed_schema_file_is_the_generated_one(kind: str) -> None:
    assert SCHEMAS_DIR.resolve() == PROJECT_ROOT / "schemas"  # the package's link to the checkout's folder
    path = SCHEMAS_DIR / schema_file_name(kind)
    assert path.read_text(encoding="utf-8") == schema_text(kind), f"{path.name} is stale: run {COMMAND}"


def test_every_schema_file_is_generated_or_kept_by_hand_for_a_stated_reason() -> None:
    on_disk = {path.name.removesuffix(".schema.json") for path in SCHEMAS_DIR.glob("*.schema.json")}
    assert not set(GENERATED) & set(HAND_KEPT)
    assert on_disk == set(GENERATED) | set(HAND_KEPT)
    assert all(reason.strip() for reason in HAND_KEPT.values())


def test_the_check_fails_on_a_stale_or_missing_file_and_passes_on_current_ones(tmp_path: Path) -> None:
    def check() -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "scripts.schema_files", "--check", "--folder", str(tmp_path)]
        return subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)

    missing = check()
    assert missing.returncode == 1 and f"run {COMMAND}" in missing.stderr
    assert stale_files(tmp_path) == [schema_file_name(kind) for kind in GENERATED]
    for kind in GENERATED:
        (tmp_path / schema_file_name(kind)).write_text(schema_text(kind), encoding="utf-8")
    current = check()
    assert current.returncode == 0 and "are current" in current.stdout, current.stderr
    edited = tmp_path / schema_file_name("selection")
    edited.write_text(schema_text("selection").replace('"minItems": 1', '"minItems": 0'), encoding="utf-8")
    stale = check()
    assert stale.returncode == 1 and "selection.schema.json" in stale.stderr  # a constraint edited by hand


def golden_records(kind: str) -> list[dict[str, Any]]:
    return [json.loads(path.read_text(encoding="utf-8")) for path in sorted(GOLDEN.glob(f"*/{kind}.json"))]


FAILURE_KEYS = ["schema_version", "status", "problem_id", "reason", "detail", "recorded_at"]


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """The golden artifacts of each generated kind, and failure records written by the stages' own code (an
    unexpected error with its traceback, a pipeline error without)."""
    paths = RunPaths(tmp_path_factory.mktemp("run"))
    try:
        raise RuntimeError("boom")
    except RuntimeError as raised:
        not_generated.record(paths, "901", raised, attempt=1)
    not_generated.record(paths, "902", PipelineError("refused"), attempt=0)
    not_scored.record(paths, "901", RuntimeError("boom"))
    written = {
        "not_generated": [paths.not_generated("901"), paths.not_generated("902")],
        "not_scored": [paths.not_scored("901")],
    }
    found = {kind: golden_records(kind) for kind in ARTIFACT_KINDS}
    for kind, files in written.items():
        found[kind] += [json.loads(path.read_text(encoding="utf-8")) for path in files]
    return found


def test_failure_records_are_written_with_their_keys_in_the_order_they_always_had(
    samples: dict[str, list[dict[str, Any]]],
) -> None:
    unexpected, refused = samples["not_generated"][-2:]
    assert list(unexpected) == [*FAILURE_KEYS, "attempt"] and unexpected["attempt"] == 1
    assert unexpected["reason"] == "RuntimeError: boom" and "Traceback" in unexpected["detail"]
    assert refused["reason"] == "refused" and refused["detail"] is None and refused["attempt"] == 0
    assert list(samples["not_scored"][-1]) == FAILURE_KEYS and samples["not_scored"][-1]["status"] == "not_scored"


@pytest.mark.parametrize("kind", ARTIFACT_KINDS)
def test_every_sample_artifact_of_a_generated_kind_validates(kind: str, samples: dict[str, list[Any]]) -> None:
    assert samples[kind], f"no sample {kind}.json"
    for record in samples[kind]:
        validate(kind, record)


def mutated(record: dict[str, Any], path: tuple[str | int, ...], value: object) -> dict[str, Any] | None:
    """A copy of `record` with the value at `path` replaced by `value` (DELETE: the key removed); None when the
    record has no such place (e.g. a record written before fingerprint parts were stored)."""
    copied = copy.deepcopy(record)
    parent: Any = copied
    for step in path[:-1]:
        try:
            parent = parent[step]
        except (KeyError, IndexError):
            return None
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return copied


ENTRY = ("problems", 0)
RUN_A = ("runs", "A")
FLIP = {"problem_id": "1", "step_id": "1.1", "status_a": "pass", "status_b": "fail"}
STEP = ("steps", 0)
ATTEMPT = ("attempts", 0)
EVALUATION = (*ATTEMPT, "meta", "evaluation")
VERDICT = (*EVALUATION, "steps", 0)
# What the hand-written schemas refused, by kind: a small mutation of a golden record each.
REFUSED: dict[str, list[tuple[str, tuple[str | int, ...], object]]] = {
    "selection": [
        ("the format's version", ("schema_version",), 2),
        ("a fingerprint that is no sha256", ("fingerprint",), "abc"),
        ("no fingerprint", ("fingerprint",), DELETE),
        ("fingerprint parts without a part", ("fingerprint_parts", "code"), DELETE),
        ("fingerprint parts with an unknown part", ("fingerprint_parts", "extra"), {}),
        ("fingerprint parts: an input digest of a number", ("fingerprint_parts", "inputs", "x"), 1),
        ("a status other than complete", ("status",), "partial"),
        ("a dataset of no text", ("dataset",), None),
        ("an unknown split", ("split",), "dev"),
        ("no category", ("category",), []),
        ("a category of a number", ("category",), [1]),
        ("sample ids of no array", ("sample_ids",), "1,2"),
        ("no problems key", ("problems",), DELETE),
        ("no problems", ("problems",), []),
        ("a problem with an extra key", (*ENTRY, "extra"), 1),
        ("a problem without its layout", (*ENTRY, "layout"), DELETE),
        ("a problem's field of null", (*ENTRY, "field"), None),
        ("a problem's split of all", (*ENTRY, "split"), "all"),
        ("a problem's fingerprint that is no sha256", (*ENTRY, "fingerprint"), "f" * 63),
        ("a problem without steps", (*ENTRY, "steps"), 0),
        ("a negative count of scored steps", (*ENTRY, "scored_steps"), -1),
        ("steps of a number that is not whole", (*ENTRY, "steps"), 1.5),
        ("an empty layout", (*ENTRY, "layout"), []),
        ("a layout step with an extra key", (*ENTRY, "layout", 0, "extra"), 1),
        ("a layout step without an id", (*ENTRY, "layout", 0, "step_id"), ""),
        ("a layout step's prefilled of a number", (*ENTRY, "layout", 0, "prefilled"), 0),
    ],
    "manifest": [
        ("no fingerprint", ("fingerprint",), DELETE),
        ("a status other than complete", ("status",), "partial"),
        ("no verify_checksums", ("verify_checksums",), DELETE),
        ("official_targets of a word", ("official_targets",), "no"),
        ("no targets", ("targets",), DELETE),
        ("targets without a kind", ("targets", "kind"), DELETE),
        ("targets of an unknown kind", ("targets", "kind"), "guessed"),
        ("targets without a path", ("targets", "path"), DELETE),
        ("a targets path of a number", ("targets", "path"), 1),
        ("a targets digest of a number", ("targets", "sha256"), 1),
        ("a targets note of null", ("targets", "note"), None),
        ("no files", ("files",), DELETE),
        ("files of an array", ("files",), []),
        ("a file of no object", ("files", "13.6.txt"), "x"),
        ("a file without its size", ("files", "13.6.txt", "size"), DELETE),
        ("a file of a negative size", ("files", "13.6.txt", "size"), -1),
        ("a file digest that is no sha256", ("files", "13.6.txt", "sha256"), "ABC"),
        ("a file without its source", ("files", "13.6.txt", "source"), DELETE),
        ("a file of an unknown checksum", ("files", "13.6.txt", "checksum"), "trusted"),
        ("warnings of a word", ("warnings",), "x"),
        ("a warning of a number", ("warnings",), [1]),
    ],
    "not_generated": [
        ("another status", ("status",), "not_scored"),
        ("an extra key", ("extra",), 1),
        ("no problem id", ("problem_id",), DELETE),
        ("a reason of null", ("reason",), None),
        ("no detail key", ("detail",), DELETE),
        ("a detail of a number", ("detail",), 1),
        ("no time", ("recorded_at",), DELETE),
        ("a negative attempt", ("attempt",), -1),
        ("an attempt of null", ("attempt",), None),
    ],
    "not_scored": [
        ("another status", ("status",), "not_generated"),
        ("an attempt (not scored records have none)", ("attempt",), 0),
        ("no reason", ("reason",), DELETE),
        ("a detail of a list", ("detail",), []),
        ("a time of a number", ("recorded_at",), 0),
    ],
    "summary": [
        ("a status outside its words", ("status",), "done"),
        ("a fingerprint that is no sha256", ("fingerprint",), "x"),
        ("no model", ("model",), DELETE),
        ("an unknown split", ("split",), "dev"),
        ("with_background of a word", ("with_background",), "yes"),
        ("a carry of null", ("carry",), None),
        ("no attempts per problem", ("attempts_per_problem",), 0),
        ("a start of a number", ("run_started",), 1),
        ("targets of an unknown kind", ("targets", "kind"), "guessed"),
        ("a targets note of null", ("targets", "note"), None),
        ("a negative attempt scored", ("attempt_scored",), -1),
        ("a rate above one", ("main_problem_resolve_rate",), 1.5),
        ("a negative step rate", ("subproblem",), -0.1),
        ("no Total", ("Total",), DELETE),
        ("a negative count", ("skipped_steps",), -1),
        ("no intervals", ("intervals",), DELETE),
        ("intervals without the step interval", ("intervals", "subproblem"), DELETE),
        ("a resolve interval of another method", ("intervals", "main_problem_resolve_rate", "method"), "normal"),
        ("a step interval of a negative se", ("intervals", "subproblem", "se"), -1),
        ("a design effect below one", ("intervals", "subproblem", "design_effect"), 0.5),
        ("an effective size of zero", ("intervals", "subproblem", "effective_n"), 0),
        ("a category group of a negative Total", ("by_category", "unclassified", "Total"), -1),
        ("a subfield group without its field", ("by_subfield", "unclassified", "field"), DELETE),
        ("a field group's rate above one", ("by_field", "unclassified", "subproblem"), 2),
        ("no split groups", ("by_split",), DELETE),
        ("status counts with an unknown status", ("status_counts", "ok"), 1),
        ("status counts without pass", ("status_counts", "pass"), DELETE),
        ("a problem of an unknown state", ("problems", 0, "state"), "weird"),
        ("a problem without its first failure", ("problems", 0, "first_failure"), DELETE),
        ("a problem's step of an unknown status", ("problems", 0, "steps", 0, "status"), "ok"),
        ("a problem's step reason of null", ("problems", 0, "steps", 0, "reason"), None),
        ("a problem's step tools of a negative count", ("problems", 0, "steps", 0, "tools", "calls"), -1),
        ("a problem's negative cost", ("problems", 0, "cost"), -1),
        ("a problem's attempt cost below zero", ("problems", 0, "attempt_costs"), [-1]),
        ("a problem's usage without its calls", ("problems", 0, "usage", "calls"), DELETE),
        ("a failed problem without its reason", ("failed_problems",), [{"problem_id": "1"}]),
        ("usage without the problems reporting", ("usage", "problems_reporting"), DELETE),
        ("usage of no unknown calls written", ("usage", "unknown_calls"), 0),
        ("a negative latency", ("latency_s",), -1),
        ("cost of a negative attempt count", ("cost", "attempts_priced"), -1),
        ("cost per attempt below zero", ("cost", "per_attempt"), [-0.5]),
        (
            "prices without the currency",
            ("cost", "prices"),
            {"input_per_mtok": 1, "output_per_mtok": 1, "cached_input_per_mtok": None},
        ),
        ("a project without dirty", ("project", "dirty"), DELETE),
        ("no concurrency", ("concurrency",), 0),
        ("tool use without all attempts", ("tool_use", "all_attempts"), DELETE),
        ("tool use of a negative other", ("tool_use", "attempt_scored", "other"), -1),
        ("a plot of a number", ("plots",), [1]),
        ("attempts of an unknown strategy", ("attempts",), {"strategy": "max"}),
        ("attempts without a strategy", ("attempts",), {"error": "x"}),
        (
            "attempts' pass@k interval above one",
            ("attempts",),
            {"strategy": "avg", "pass_at_k_intervals": {"1": {"low": 0, "high": 2}}},
        ),
        (
            "attempts' interval method without its level",
            ("attempts",),
            {"strategy": "avg", "interval_method": {"method": "m"}},
        ),
        ("a confinement of a number", ("confinement",), 1),
        ("tool calls without a total", ("tool_calls", "total"), DELETE),
        ("an interval level of one", ("uncertainty", "level"), 1),
        ("no smallest group", ("uncertainty", "min_group_problems"), 0),
        ("an inspect_ai view rate above one", ("inspect_ai_view", "subproblem"), 2),
        ("a caveat of an unknown kind", ("caveats",), [{"kind": "x", "text": "t"}]),
        ("a caveat with an extra key", ("caveats",), [{"kind": "subset", "text": "t", "more": 1}]),
        (
            "an invocation of another stage",
            ("invocations",),
            [{"started": "a", "ended": "b", "seconds": 1, "stages": ["select"], "problems": 1}],
        ),
        (
            "setup with an extra key",
            ("setup",),
            {
                "base_url": None,
                "tool_names": [],
                "tool_use_max_loops": 1,
                "snippets_ran": "x",
                "settings": {},
                "more": 1,
            },
        ),
        (
            "setup of no loops",
            ("setup",),
            {"base_url": None, "tool_names": [], "tool_use_max_loops": 0, "snippets_ran": "x", "settings": {}},
        ),
        (
            "a published setting without its verdict",
            ("published_setting",),
            {"protocol": "p", "title": "t", "reasons": []},
        ),
        (
            "a reference above 100 percent",
            ("references",),
            [
                {
                    "model": "m",
                    "protocol": "p",
                    "source": "s",
                    "main_problem_resolve_rate": 101,
                    "subproblem": 1,
                    "comparable": True,
                    "reasons": [],
                    "resolve_inside": None,
                    "steps_inside": None,
                }
            ],
        ),
        ("environments without every_verdict", ("environments",), {"environments": [], "passed_before_the_others": 0}),
        ("a negative count of cached timeouts", ("cached_timeouts",), -1),
        ("a weak pass without its reason", ("weak_official_tests",), [{"step_id": "1.1"}]),
    ],
    "details": [
        ("a fingerprint that is no sha256", ("fingerprint",), "x"),
        ("a status outside its words", ("status",), "partial"),
        ("no task id", ("task_id",), DELETE),
        ("no category", ("category",), DELETE),
        ("no attempts", ("attempts",), []),
        ("an attempt without its final answer", (*ATTEMPT, "final_answer"), DELETE),
        ("a final answer without its step codes", (*ATTEMPT, "final_answer", "step_codes"), DELETE),
        ("artifacts' step codes of an array", (*ATTEMPT, "artifacts", "step_codes"), []),
        ("a trajectory of an object", (*ATTEMPT, "trajectory"), {}),
        ("correct of a number", (*ATTEMPT, "correct"), 1),
        ("a score above one", (*ATTEMPT, "score"), 1.5),
        ("meta without its evaluation", (*ATTEMPT, "meta", "evaluation"), DELETE),
        ("a meta latency of a word", (*ATTEMPT, "meta", "latency_s"), "1"),
        ("tool outcomes' total of a number", (*ATTEMPT, "meta", "tool_outcomes"), {"total": 1}),
        ("an evaluation without its error key", (*EVALUATION, "error"), DELETE),
        ("a negative count of correct steps", (*EVALUATION, "total_correct"), -1),
        ("a step correctness of a word", (*EVALUATION, "subproblem_correctness"), ["yes"]),
        ("a verdict of an unknown status", (*VERDICT, "status"), "ok"),
        ("a verdict without its stdout", (*VERDICT, "stdout"), DELETE),
        ("a verdict's tests without passed", (*VERDICT, "tests", "passed"), DELETE),
        ("a verdict's return code of a word", (*VERDICT, "returncode"), "0"),
        ("a verdict of a negative duration", (*VERDICT, "duration_s"), -1),
        ("a verdict's environment without its reason", (*VERDICT, "environments"), [{"name": "a", "status": "pass"}]),
        ("a verdict's compared values without a test", (*VERDICT, "compared"), {"values": []}),
        ("the targets of a word (tighter: the hand-written schema left them open)", (*EVALUATION, "targets"), "x"),
    ],
    "generation": [
        ("a status outside its words", ("status",), "partial"),
        ("no problem id", ("problem_id",), DELETE),
        ("a negative attempt", ("attempt",), -1),
        ("an unknown mode", ("mode",), "agent"),
        ("an unknown api protocol", ("api_protocol",), "grpc"),
        ("an unknown carry", ("carry",), "none"),
        (
            "with_background of a word (tighter than the hand-written schema, which left it untyped)",
            ("with_background",),
            "yes",
        ),
        ("no concurrency", ("concurrency",), 0),
        ("no error key", ("error",), DELETE),
        ("usage without its input tokens", ("usage", "input_tokens"), DELETE),
        ("usage of negative tokens", ("usage", "total_tokens"), -1),
        ("usage of no unknown calls written", ("usage", "unknown_calls"), 0),
        ("a negative latency", ("latency_s",), -0.1),
        ("an endpoint of no object", ("endpoints",), ["x"]),
        ("an endpoint without its server", ("endpoints",), [{"base_url": "u", "served_model": None}]),
        (
            "an endpoint's server fact of a list",
            ("endpoints",),
            [{"base_url": "u", "served_model": None, "server": {"a": []}}],
        ),
        ("no steps", ("steps",), DELETE),
        ("a step of an unknown status", (*STEP, "status"), "done"),
        ("a step without its code key", (*STEP, "code"), DELETE),
        ("a step's prompt fingerprint that is no sha256", (*STEP, "prompt_fingerprint"), "abc"),
        ("a step's prefilled of a word", (*STEP, "prefilled"), "no"),
        ("a step's finish reason of a number", (*STEP, "finish_reason"), 1),
        ("a step's negative tool outcome", (*STEP, "tool_outcomes", "ok"), -1),
        ("a step's negative endpoint index", (*STEP, "endpoint"), -1),
        ("a step's usage without its total", (*STEP, "usage", "total_tokens"), DELETE),
        ("a step without its latency", (*STEP, "latency_s"), DELETE),
        ("a trajectory without its messages", (*STEP, "trajectory", "messages"), DELETE),
        ("a trajectory message of no object", (*STEP, "trajectory", "messages"), ["hi"]),
        ("a trajectory's turns_recorded of false", (*STEP, "trajectory", "turns_recorded"), False),
        ("a model call without its usage", (*STEP, "trajectory", "calls", 0, "usage"), DELETE),
        ("a model call of a negative wait", (*STEP, "trajectory", "calls", 0, "queued_s"), -1),
        ("a model call of fractional retries", (*STEP, "trajectory", "calls", 0, "retries"), 0.5),
        (
            "a tool call not run without its reason",
            (*STEP, "trajectory", "tool_calls_not_run"),
            [{"call_id": "c", "name": "n"}],
        ),
    ],
    "compare": [
        ("the format's version", ("schema_version",), 2),
        ("an extra key", ("extra",), 1),
        ("no runs", ("runs",), DELETE),
        ("runs without B", ("runs", "B"), DELETE),
        ("runs with a third run", ("runs", "C"), {}),
        ("a run with an extra key", (*RUN_A, "extra"), 1),
        ("a run without its model", (*RUN_A, "model"), DELETE),
        ("a run's dataset of a number", (*RUN_A, "dataset"), 1),
        ("a run's with_background of null", (*RUN_A, "with_background"), None),
        ("a negative count of selected problems", (*RUN_A, "problems_selected"), -1),
        ("counts without Error", (*RUN_A, "counts", "Error"), DELETE),
        ("counts with an extra key", (*RUN_A, "counts", "extra"), 1),
        ("a negative count of resolved problems", (*RUN_A, "counts", "main_problem_resolved"), -1),
        ("status counts with an unknown status", (*RUN_A, "status_counts", "ok"), 1),
        ("status counts without no_verdict", (*RUN_A, "status_counts", "no_verdict"), DELETE),
        ("a negative status count", (*RUN_A, "status_counts", "not_generated"), -1),
        ("cost without its calls", (*RUN_A, "cost", "calls"), DELETE),
        ("cost of fractional tokens", (*RUN_A, "cost", "input_tokens"), 1.5),
        ("cost with an extra key", (*RUN_A, "cost", "extra"), 1),
        ("a negative count of attempts reporting", (*RUN_A, "cost", "attempts_reporting"), -1),
        ("no attempts key", (*RUN_A, "attempts"), DELETE),
        ("attempts of a word", (*RUN_A, "attempts"), "x"),
        (
            "attempts without their error key",
            (*RUN_A, "attempts"),
            {
                "attempts": 2,
                "mean_main_problem_resolve_rate": 0.5,
                "mean_subproblem_rate": 0.5,
                "pass_at_k": {"1": 0.5},
                "resolved_by_any_attempt": 1,
                "steps_passed_by_any_attempt": 1,
            },
        ),
        (
            "a pass@k of k zero",
            (*RUN_A, "attempts"),
            {
                "attempts": 2,
                "mean_main_problem_resolve_rate": 0.5,
                "mean_subproblem_rate": 0.5,
                "pass_at_k": {"0": 0.5},
                "resolved_by_any_attempt": 1,
                "steps_passed_by_any_attempt": 1,
                "error": None,
            },
        ),
        ("narrowed_to of a list", ("narrowed_to",), []),
        ("compared problems of a number", ("compared_problems",), [1]),
        ("no statement_differs", ("statement_differs",), DELETE),
        ("a setting difference without b", ("setting_differences",), [{"name": "n", "a": "1"}]),
        (
            "a setting difference with an extra key",
            ("setting_differences",),
            [{"name": "n", "a": "1", "b": "2", "c": 3}],
        ),
        ("paired with an extra key", ("paired", "extra"), 1),
        ("paired without neither_scored", ("paired", "neither_scored"), DELETE),
        ("resolved with an extra key", ("paired", "resolved", "extra"), 1),
        ("a negative count resolved by both", ("paired", "resolved", "both"), -1),
        ("a McNemar p above one", ("paired", "resolved", "mcnemar_p"), 1.5),
        ("steps with an extra key", ("paired", "steps", "extra"), 1),
        ("steps without p_value", ("paired", "steps", "p_value"), DELETE),
        ("a step difference of a word", ("paired", "steps", "difference"), "x"),
        ("a step method of null", ("paired", "steps", "method"), None),
        ("a correlation below minus one", ("paired", "steps", "correlation"), -1.5),
        ("problems lost of no array", ("problems_lost",), "1"),
        ("a flip without its step", ("steps_lost",), [{"problem_id": "1", "status_a": "pass", "status_b": "fail"}]),
        ("a flip of an unknown status", ("steps_gained",), [{**FLIP, "status_b": "ok"}]),
        ("a flip with an extra key", ("steps_gained",), [{**FLIP, "extra": 1}]),
    ],
}


def test_every_generated_artifact_kind_has_its_refusals() -> None:
    assert set(REFUSED) == set(ARTIFACT_KINDS)


@pytest.mark.parametrize(
    ("kind", "what", "path", "value"),
    [(kind, *case) for kind, cases in REFUSED.items() for case in cases],
    ids=[f"{kind}: {case[0]}" for kind, cases in REFUSED.items() for case in cases],
)
def test_a_record_the_hand_written_schema_refused_is_still_refused(
    kind: str, what: str, path: tuple[str | int, ...], value: object, samples: dict[str, list[dict[str, Any]]]
) -> None:
    mutations = [found for record in samples[kind] if (found := mutated(record, path, value)) is not None]
    assert mutations, f"no sample {kind}.json has {path}"
    for mutation in mutations:
        with pytest.raises(ArtifactError, match=f"^{kind} artifact invalid at "):
            validate(kind, mutation)
