"""A run's caveats, computed once: what a reader of its headline numbers must know. The summary records them
(`Summary.caveats`) and every place a headline appears shows them: the final terminal line, summary.md's first
lines, report.html's header, the run index, compare and the inspect_ai log export.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stages.benchmark.datasets import DEFAULT_DATASET
from stages.config.environments import parse_environments
from stages.config.settings import Settings
from stages.numbers.metrics import behaved_as_naive
from stages.numbers.rows import ProblemRow, weak_passes
from stages.records.results import GENERATION_FAILED_STATES, NO_DETAILS_STATES
from stages.records.summary import Caveat, CaveatKind
from stages.summarize.targets_info import TargetsInfo


@dataclass(frozen=True)
class CaveatInputs:
    """What the caveats are read from: the settings, the problem rows, the targets and config.json's settings."""

    settings: Settings
    rows: Sequence[ProblemRow]
    targets: TargetsInfo
    recorded: Mapping[str, Any]


TARGET_CAVEATS: dict[str, tuple[CaveatKind, str]] = {
    "derived": ("targets_derived", "targets derived from reference code"),
    "missing": ("targets_missing", "targets missing"),
    "unknown": ("targets_unknown", "targets unknown"),
}


def _targets(found: CaveatInputs) -> Caveat | None:
    known = TARGET_CAVEATS.get(found.targets.kind)
    return None if known is None else Caveat(*known)


def _tool_use_as_naive(found: CaveatInputs) -> str | None:
    if not behaved_as_naive(found.rows, found.settings.mode):
        return None
    return "tool_use behaved as naive (no tool call in the whole run: the server may ignore tools)"


def _of_dataset(settings: Settings) -> str:
    """` of dataset verified` for a dataset other than the original (whose wording stays as it was)."""
    return "" if settings.dataset == DEFAULT_DATASET else f" of dataset {settings.dataset}"


def subset_phrase(settings: Settings, selected: int) -> str | None:
    """`2 of the 65 problems of split test (a subset)` when not every problem of the split is selected."""
    whole = settings.benchmark.dataset.problem_count(settings.split)
    if settings.sample_ids or settings.categories is not None or selected != whole:
        return f"{selected} of the {whole} problems of split {settings.split}{_of_dataset(settings)} (a subset)"
    return None


def _subset(found: CaveatInputs) -> str | None:
    settings = found.settings
    subset = subset_phrase(settings, len(found.rows))
    parts = [subset] if subset else []
    if settings.attempts != 1:
        parts.append(f"{settings.attempts} attempts per problem (the headline scores attempt 1)")
    return "; ".join(parts) or None


def _weak_tests(found: CaveatInputs) -> str | None:
    passes = weak_passes(found.rows)
    return f"{len(passes)} pass(es) on official tests known to be weak" if passes else None


# Why a problem failed, in the order a reader asks (the first that applies names it), with its phrase.
FAILURE_KINDS: tuple[tuple[str, Callable[[ProblemRow], bool]], ...] = (
    ("not generated", lambda row: row.state in GENERATION_FAILED_STATES),
    ("not scored", lambda row: row.state in NO_DETAILS_STATES or any(s.status == "no_verdict" for s in row.steps)),
    (
        "with steps that could not be evaluated (eval_error)",
        lambda row: any(s.status == "eval_error" for s in row.steps),
    ),
)


def failure_kind(row: ProblemRow) -> str:
    """Why a failed problem failed, as FAILURE_KINDS says it (`failed otherwise` for anything else)."""
    return next((phrase for phrase, applies in FAILURE_KINDS if applies(row)), "failed otherwise")


def _failed_problems(found: CaveatInputs) -> str | None:
    failed = [row for row in found.rows if row.failed]
    if not failed:
        return None
    kinds = Counter(failure_kind(row) for row in failed)
    order = [phrase for phrase, _ in FAILURE_KINDS] + ["failed otherwise"]
    parts = ", ".join(f"{kinds[phrase]} {phrase}" for phrase in order if kinds[phrase])
    return f"{len(failed)} problem(s) failed (counted as unresolved): {parts}"


def _steps_not_generated(found: CaveatInputs) -> str | None:
    count = sum(step.status == "not_generated" for row in found.rows for step in row.steps)
    return f"{count} step(s) never generated (counted as not passed)" if count else None


def _snippets_elsewhere(found: CaveatInputs) -> str | None:
    sandbox = found.recorded.get("sandbox_url") or ""
    if found.recorded.get("mode") != "tool_use" or not sandbox:
        return None
    return f"tool snippets ran in the sandbox at {sandbox}, the tests on this machine"


def _fewer_environments(found: CaveatInputs) -> str | None:
    """A dataset whose published protocol grades every step in several environments, graded in fewer."""
    settings = found.settings
    wanted = settings.benchmark.dataset.protocol_environments
    graded = len(parse_environments(settings.environments)) if settings.environments else 1
    if graded >= len(wanted):
        return None
    return (
        f"graded in {graded} environment(s); the published protocol of dataset {settings.dataset} grades every step "
        f"in {len(wanted)} ({', '.join(wanted)}) and passes it when any passes (`doit environments`, then "
        "environments=)"
    )


CAVEAT_RULES: tuple[Callable[[CaveatInputs], Caveat | None], ...] = (
    _targets,
    lambda found: _phrased("tool_use_as_naive", _tool_use_as_naive(found)),
    lambda found: _phrased("subset", _subset(found)),
    lambda found: _phrased("weak_tests_passed", _weak_tests(found)),
    lambda found: _phrased("problems_failed", _failed_problems(found)),
    lambda found: _phrased("steps_not_generated", _steps_not_generated(found)),
    lambda found: _phrased("snippets_elsewhere", _snippets_elsewhere(found)),
    lambda found: _phrased("fewer_environments", _fewer_environments(found)),
)


def _phrased(kind: CaveatKind, phrase: str | None) -> Caveat | None:
    return None if phrase is None else Caveat(kind, phrase)


def run_caveats(found: CaveatInputs) -> tuple[Caveat, ...]:
    """Every caveat of the run, in a fixed order."""
    return tuple(caveat for rule in CAVEAT_RULES if (caveat := rule(found)) is not None)
