"""The artifacts' records are declared (stages.records.declared): their JSON form follows from their fields, and
the golden files read back to the records they hold."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from stages.compare.record import (
    ComparedRunRecord,
    ComparisonRecord,
    PairedRecord,
    RunAttempts,
    RunCost,
    RunCounts,
    SettingDifference,
)
from stages.generate.api_errors import RetryRecord
from stages.records.declared import Declared
from stages.records.details import Details, Evaluation, ScoredAttempt, TargetsUsed
from stages.records.endpoint import EndpointRecord, EndpointUse
from stages.records.generation import GeneratedStep, Generation, ToolStats
from stages.records.manifest import Manifest, ManifestFile, ManifestTargets
from stages.records.verdict import EnvironmentVerdict, StepVerdict
from stages.storage.json_values import JSONObject, freeze_object
from stages.storage.paths import PROJECT_ROOT
from tests.golden.make_golden import BEFORE_PARTS, CURRENT

DECLARED: tuple[type, ...] = (
    Manifest,
    ManifestFile,
    ManifestTargets,
    EndpointRecord,
    EndpointUse,
    EnvironmentVerdict,
    ToolStats,
    GeneratedStep,
    Generation,
    Evaluation,
    ScoredAttempt,
    RunCounts,
    RunCost,
    RunAttempts,
    ComparedRunRecord,
    PairedRecord,
    SettingDifference,
    ComparisonRecord,
    RetryRecord,
    TargetsUsed,
)
# Modules whose records are declared, and the converters in them still written by hand (each says why).
DECLARING_MODULES = (
    "stages/records/manifest.py",
    "stages/records/endpoint.py",
    "stages/records/verdict.py",
    "stages/records/generation.py",
    "stages/records/details.py",
    "stages/compare/record.py",
    "stages/generate/api_errors.py",
)
WRITTEN_BY_HAND = {"StepVerdict.from_record", "Details.from_record"}
GOLDEN: dict[str, type[Declared]] = {
    "manifest": Manifest,
    "generation": Generation,
    "details": Details,
    "compare": ComparisonRecord,
}


@pytest.mark.parametrize("record", DECLARED, ids=lambda record: record.__name__)
def test_the_record_writes_and_reads_by_its_declarations(record: type) -> None:
    assert issubclass(record, Declared)
    assert "from_record" not in vars(record) and "to_record" not in vars(record)


def test_no_converter_is_written_by_hand_beside_the_declared_ones_but_the_named_special_cases() -> None:
    found = set()
    for module in DECLARING_MODULES:
        tree = ast.parse((PROJECT_ROOT / module).read_text(encoding="utf-8"))
        for record in (node for node in tree.body if isinstance(node, ast.ClassDef)):
            found |= {
                f"{record.name}.{method.name}"
                for method in record.body
                if isinstance(method, ast.FunctionDef) and method.name in ("from_record", "to_record")
            }
    assert found == WRITTEN_BY_HAND


@pytest.mark.parametrize("folder", [CURRENT, BEFORE_PARTS], ids=lambda folder: folder.name)
@pytest.mark.parametrize("kind", sorted(GOLDEN))
def test_a_golden_file_reads_back_to_the_record_it_holds(folder: Path, kind: str) -> None:
    stored = json.loads((folder / f"{kind}.json").read_text(encoding="utf-8"))
    stored.pop("schema_version")
    assert GOLDEN[kind].from_record(freeze_object(stored)).to_record() == stored


def test_an_endpoint_use_is_its_endpoint_with_the_steps_it_answered() -> None:
    endpoint = EndpointRecord("http://127.0.0.1:8/v1", "m", freeze_object({"context": 4096}))
    record = EndpointUse(endpoint, 3).to_record()
    assert list(record) == ["base_url", "served_model", "server", "steps"]
    assert EndpointUse.from_record(freeze_object(record)) == EndpointUse(endpoint, 3)
    assert EndpointUse.from_record(freeze_object({"steps": "3", "server": [1]})) == EndpointUse(EndpointRecord(""), 0)


def test_a_step_entry_keeps_its_environments_verdicts_as_written() -> None:
    environments = (EnvironmentVerdict("a", "fail", "wrong", False, 1.23456), EnvironmentVerdict("b", "pass", "", True))
    entry = StepVerdict("1.1", "pass", "", 2, 2, environments=environments).as_record()
    assert entry["environments"] == [
        {"name": "a", "status": "fail", "reason": "wrong", "cached": False, "duration_s": 1.235},
        {"name": "b", "status": "pass", "reason": "", "cached": True, "duration_s": 0.0},
    ]
    hostile: dict[str, object] = {**entry, "environments": [{"status": "won", "cached": 1, "duration_s": "2"}, 3]}
    read = StepVerdict.from_record(freeze_object(hostile)).environments
    assert read == (EnvironmentVerdict("", "eval_error", "", True, 0.0),)


def test_a_generation_writes_its_keys_in_the_order_it_always_had() -> None:
    stored = json.loads((CURRENT / "generation.json").read_text(encoding="utf-8"))
    generation = Generation.from_record(freeze_object(stored))
    answered = tuple(dataclasses.replace(step, endpoint=0) for step in generation.steps)
    endpoints = (EndpointRecord("built-in", "gold"),)
    record: Any = dataclasses.replace(generation, endpoints=endpoints, steps=answered).to_record()
    assert list(record) == [
        "fingerprint",
        "fingerprint_parts",
        "status",
        "problem_id",
        "attempt",
        "model",
        "mode",
        "api_protocol",
        "with_background",
        "carry",
        "concurrency",
        "error",
        "usage",
        "latency_s",
        "endpoints",
        "steps",
    ]
    assert list(record["steps"][0]) == [
        "step_id",
        "prefilled",
        "status",
        "prompt_fingerprint",
        "code",
        "raw_answer",
        "error",
        "finish_reason",
        "trajectory",
        "tool_outcomes",
        "endpoint",
        "usage",
        "latency_s",
    ]


def test_details_read_their_attempts_numbered_and_told_the_record_level_failure() -> None:
    stored = json.loads((CURRENT / "details.json").read_text(encoding="utf-8"))
    assert issubclass(Details, Declared) and "to_record" not in vars(Details)
    attempt = stored["attempts"][0]
    failed = Details.from_record(freeze_object({**stored, "status": "generation_error"}))
    assert [(a.index, a.record_failed) for a in failed.attempts] == [(0, True)]
    two = Details.from_record(freeze_object({**stored, "status": "generation_error", "attempts": [attempt, attempt]}))
    assert [(a.index, a.record_failed) for a in two.attempts] == [(0, False), (1, False)]
    written: Any = two.to_record()
    assert list(written["attempts"][1]) == ["final_answer", "artifacts", "trajectory", "correct", "score", "meta"]
    assert list(written["attempts"][1]["meta"]) == ["evaluation", "tool_outcomes", "usage", "latency_s"]


def test_a_retry_is_written_as_a_calls_retry_log_always_wrote_it() -> None:
    assert RetryRecord(2, "HTTP 500", 1.23456).to_record() == {"attempt": 2, "error": "HTTP 500", "delay_s": 1.235}


def test_an_evaluation_records_the_targets_it_was_scored_against_as_a_typed_record() -> None:
    used: JSONObject = {"kind": "derived", "sha256": "f7a9", "note": None}
    evaluation = Evaluation.of("1", (StepVerdict("1.1", "pass", "ok", 1, 1),), None, used)
    assert evaluation.targets == TargetsUsed("derived", "f7a9", None)
    written: Any = evaluation.to_record()
    assert written["targets"] == used and list(written["targets"]) == ["kind", "sha256", "note"]
    stored = json.loads((CURRENT / "details.json").read_text(encoding="utf-8"))
    read = Details.from_record(freeze_object(stored)).attempts[0].evaluation.targets
    assert read == TargetsUsed(
        "derived", stored["attempts"][0]["meta"]["evaluation"]["targets"]["sha256"], "2 validation steps"
    )
