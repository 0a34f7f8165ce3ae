"""The artifacts' records are declared (stages.records.declared): their JSON form follows from their fields, and
the golden files read back to the records they hold."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from stages.records.declared import Declared
from stages.records.endpoint import EndpointRecord, EndpointUse
from stages.records.generation import GeneratedStep, Generation, ToolStats
from stages.records.manifest import Manifest, ManifestFile, ManifestTargets
from stages.records.verdict import EnvironmentVerdict, StepVerdict
from stages.storage.json_values import freeze_object
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
)
GOLDEN: dict[str, type[Declared]] = {"manifest": Manifest, "generation": Generation}


@pytest.mark.parametrize("record", DECLARED, ids=lambda record: record.__name__)
def test_the_record_writes_and_reads_by_its_declarations(record: type) -> None:
    assert issubclass(record, Declared)
    assert "from_record" not in vars(record) and "to_record" not in vars(record)


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
    hostile = {**entry, "environments": [{"status": "won", "cached": 1, "duration_s": "2"}, 3]}
    read = StepVerdict.from_record(freeze_object(hostile)).environments
    assert read == (EnvironmentVerdict("", "eval_error", "", True, 0.0),)


def test_a_generation_writes_its_keys_in_the_order_it_always_had() -> None:
    stored = json.loads((CURRENT / "generation.json").read_text(encoding="utf-8"))
    generation = Generation.from_record(freeze_object(stored))
    answered = tuple(dataclasses.replace(step, endpoint=0) for step in generation.steps)
    endpoints = (EndpointRecord("built-in", "gold"),)
    record = dataclasses.replace(generation, endpoints=endpoints, steps=answered).to_record()
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
