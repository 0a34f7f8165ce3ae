"""Known-weak official tests: steps whose official tests accept plainly wrong code.

`stages/benchmark/weak_tests.json` lists, with the reason, every step for which a named trivial answer (zeros of the
output's shape, one of the inputs returned unchanged, a constant) passes all of its official tests against the
targets we have. It is data, produced by `python -m scripts.weak_tests_survey` (which scores every trivial
answer of every surveyed step with the real engine; the file says how and against which targets). A pass on
such a step is flagged "weak official test" in summary.md and report.html; the official verdict is unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TypedDict

WEAK_TESTS_FILE = Path(__file__).with_name("weak_tests.json")
FLAG = "weak official test"


@dataclass(frozen=True)
class WeakTest:
    step_id: str
    passed_by: tuple[str, ...]  # names of the trivial answers that pass every official test
    reason: str

    @property
    def note(self) -> str:
        """`weak official test: <reason>`, as the summary and the report show it."""
        return f"{FLAG}: {self.reason}"


class SurveyedTargets(TypedDict):
    file: str
    sha256: str


class WeakStep(TypedDict):
    """A listed step: the trivial answers that pass it, on how many tests, and why."""

    passed_by: list[str]
    tests: int
    reason: str


class Survey(TypedDict):
    """weak_tests.json: how the survey was made, against which targets, what it tried, and the weak steps."""

    about: str
    produced_by: str
    produced_at: str
    targets: SurveyedTargets
    environment: dict[str, str]
    trivial_answers: dict[str, str]  # name (pattern) -> what that answer is
    trials: int
    surveyed: list[str]  # step ids
    steps: dict[str, WeakStep]


@lru_cache(maxsize=1)
def survey() -> Survey:
    """The whole data file (its provenance and the surveyed steps, besides the list)."""
    table: Survey = json.loads(WEAK_TESTS_FILE.read_text(encoding="utf-8"))  # this package's own file
    return table


@lru_cache(maxsize=1)
def weak_tests() -> dict[str, WeakTest]:
    """step id -> its entry, for every listed step."""
    return {
        step_id: WeakTest(step_id, tuple(entry["passed_by"]), str(entry["reason"]))
        for step_id, entry in survey()["steps"].items()
    }


def weak_test(step_id: str) -> WeakTest | None:
    return weak_tests().get(step_id)


def weak_tests_digest() -> str:
    """A digest of the list (summaries show its flags, so their fingerprint covers it)."""
    import hashlib

    return hashlib.sha256(WEAK_TESTS_FILE.read_bytes()).hexdigest()
