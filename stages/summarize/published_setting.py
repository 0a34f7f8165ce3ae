"""Whether a run is a published setting, decided once per run, and the published figures of its model beside its own.

A run is the published setting of a protocol (`stages/benchmark/protocols.json`) only when every setting the
protocol fixes has the protocol's value (of `model_params`, the request parameters it names), every problem of the
split is selected, every scored step has a verdict against the official targets, and one attempt is counted
(pass@1). The protocol judged against is `protocol=`, else the first protocol whose settings the run has. The
summary records the answer (`Summary.published`) and every writer shows that record: the final terminal line,
summary.md's first lines, report.html's header, the run index, compare and the inspect_ai log export.

A published row of the run's model (`stages/benchmark/published.json`, matched by exact alias) is set beside the
run's figures: when the run is that row's protocol's setting, whether each published rate lies in the run's 95%
interval; else the reasons the two are not comparable (`Summary.references`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from stages.benchmark.published import REQUEST_PARAMS_SETTING, Protocol, protocol_named, protocols, published_for
from stages.config.settings import Settings
from stages.numbers.rows import ProblemRow
from stages.records.summary import GroupMetrics, PublishedSetting, RateInterval, ReferenceFigure
from stages.summarize.caveats import subset_phrase
from stages.summarize.targets_info import TargetsInfo

JUDGED_STATUSES = frozenset({"pass", "fail", "timeout", "parse_error"})  # a verdict of the step's code on its tests
NO_PROTOCOL = "no protocol= given, and the run's settings are those of no published protocol"


@dataclass(frozen=True)
class RunFacts:
    """What decides whether a run is a published setting, besides its settings: its problem rows and targets."""

    settings: Settings
    rows: Sequence[ProblemRow]
    targets: TargetsInfo


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return ",".join(str(item) for item in value)
    return str(value)


def _same(value: object, fixed: object) -> bool:
    """A setting's value against a protocol's (numbers by value, lists as tuples)."""
    if isinstance(fixed, list):
        fixed = tuple(fixed)
    if isinstance(value, bool) or isinstance(fixed, bool):
        return value is fixed
    return value == fixed


def setting_differences(settings: Settings, protocol: Protocol) -> list[str]:
    """`name=value (protocol: fixed)` for every setting and request parameter that differs from the protocol's."""
    differences = []
    for name, fixed in protocol.settings.items():
        if name == REQUEST_PARAMS_SETTING:
            continue
        value = getattr(settings, name, None)
        if not _same(value, fixed):
            differences.append(f"{name}={_shown(value)} (protocol: {_shown(fixed)})")
    for name, fixed in protocol.request_params.items():
        value = settings.model_params.get(name)
        if not _same(value, fixed):
            given = "unset" if name not in settings.model_params else _shown(value)
            differences.append(f"{name}={given} (protocol: {_shown(fixed)})")
    return differences


def _subset(facts: RunFacts) -> str | None:
    return subset_phrase(facts.settings, len(facts.rows))


def _targets(facts: RunFacts) -> str | None:
    targets = facts.targets
    return None if targets.official else f"targets {targets.kind}, not the official test_data.h5"


def _unjudged(facts: RunFacts) -> str | None:
    """Scored steps without a verdict against the targets (eval_error, no verdict, not generated)."""
    counts: dict[str, int] = {}
    for row in facts.rows:
        statuses = [step.status for step in row.scored_rows]
        for status in statuses:
            if status not in JUDGED_STATUSES:
                counts[status] = counts.get(status, 0) + 1
        missing = row.steps_scored - len(statuses)
        if missing > 0:
            counts["no_verdict"] = counts.get("no_verdict", 0) + missing
    if not counts:
        return None
    total = sum(row.steps_scored for row in facts.rows)
    parts = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
    return f"{sum(counts.values())} of {total} scored steps without a verdict against the targets ({parts})"


def _attempts(facts: RunFacts) -> str | None:
    attempts = facts.settings.attempts
    return None if attempts == 1 else f"{attempts} attempts per problem (a published figure counts one: pass@1)"


RUN_CONDITIONS = (_subset, _targets, _unjudged, _attempts)


def run_reasons(facts: RunFacts) -> list[str]:
    """Why the run, whatever its settings, is no published setting: a subset, other targets, unjudged steps,
    more than one attempt."""
    return [reason for condition in RUN_CONDITIONS if (reason := condition(facts)) is not None]


def reasons_against(facts: RunFacts, protocol: Protocol) -> list[str]:
    """Why the run is not `protocol`'s published setting (empty when it is)."""
    differences = setting_differences(facts.settings, protocol)
    settings_reason = ["settings differ from the protocol's: " + ", ".join(differences)] if differences else []
    return settings_reason + run_reasons(facts)


def judged_protocol(settings: Settings) -> Protocol | None:
    """`protocol=`'s entry, else the first protocol whose every setting the run has."""
    if settings.protocol:
        return protocol_named(settings.protocol)
    return next((entry for entry in protocols() if not setting_differences(settings, entry)), None)


def published_setting(facts: RunFacts) -> PublishedSetting:
    """Whether the run is a published setting, and why not."""
    protocol = judged_protocol(facts.settings)
    if protocol is None:
        return PublishedSetting("", "", (NO_PROTOCOL, *run_reasons(facts)))
    return PublishedSetting(protocol.name, protocol.title, tuple(reasons_against(facts, protocol)))


def _inside(percent: float, interval: RateInterval | None) -> bool | None:
    """Whether a published percentage (rounded to 0.1) lies in an interval of fractions, the rounding allowed."""
    if interval is None:
        return None
    return interval.low * 100 - 0.05 <= percent <= interval.high * 100 + 0.05


def reference_figures(facts: RunFacts, headline: GroupMetrics) -> tuple[ReferenceFigure, ...]:
    """The published rows of the run's model, each with whether it is comparable and, if so, inside the run's
    95% intervals."""
    figures = []
    for row in published_for(facts.settings.model):
        protocol = protocol_named(row.protocol)
        reasons = tuple(reasons_against(facts, protocol)) if protocol is not None else ("unknown protocol",)
        comparable = not reasons
        figures.append(
            ReferenceFigure(
                model=row.model,
                protocol=row.protocol,
                source=row.source,
                main_problem_resolve_rate=row.main_problem_resolve_rate,
                subproblem=row.subproblem,
                reasons=reasons,
                resolve_inside=_inside(row.main_problem_resolve_rate, headline.resolve_interval)
                if comparable
                else None,
                steps_inside=_inside(row.subproblem, headline.step_interval) if comparable else None,
            )
        )
    return tuple(figures)


def protocol_settings_text(protocol: Protocol) -> str:
    """`split=test, mode=naive, ..., temperature=0`: what a protocol fixes, for the docs and errors."""
    plain = [f"{name}={_shown(value)}" for name, value in protocol.settings.items() if name != REQUEST_PARAMS_SETTING]
    params: Mapping[str, object] = protocol.request_params
    return ", ".join(plain + [f"{name}={_shown(value)} (model_params)" for name, value in params.items()])
