"""invocations.jsonl: when the run generated and scored, recorded as it happens.

The generate and score stages wrap each problem's work in `recorded(paths, stage, problem_id)`: one line when it
starts, one when it ends (however it ends). Each line is appended with a single write to a file opened for
appending, so lines of problems worked on at once (threads, processes) never mix, and nothing written is ever
rewritten. The run's invocations are the periods during which some problem was being generated or scored: the
problems' periods merged where they overlap or follow each other within MERGE_GAP_S (one `doit` command; a run
resumed later is a second invocation). A period without its end (the process was killed) ends at its start.
Each start line also records when its command started (`command_started`), so an invocation starts with the command
that made it (select, targets and the preflight included), not with its first problem.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, get_args

from stages.storage.paths import RunPaths

Stage = Literal["generate", "score"]
Event = Literal["start", "end"]
STAGES: tuple[Stage, ...] = get_args(Stage)
MERGE_GAP_S = 60.0  # problems' periods closer than this belong to the same invocation
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def _now() -> str:
    return datetime.now(timezone.utc).strftime(TIME_FORMAT)


def process_started() -> datetime:
    """When this process (the `doit` command) started: from /proc, its start in clock ticks after boot set against
    the time since boot now (both on the boot clock, to a clock tick; /proc/stat's boot time is whole seconds), else
    when this module was imported. A run's recorded start is its command's, not the moment its first problem was
    admitted after select and preflight."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return datetime.fromtimestamp(time.time() - max(age, 0.0), timezone.utc)
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED


_IMPORTED = datetime.now(timezone.utc)
COMMAND_STARTED: datetime = process_started()


def _append(paths: RunPaths, stage: Stage, problem_id: str, event: Event) -> None:
    record = {"stage": stage, "problem_id": problem_id, "event": event, "at": _now(), "process": os.getpid()}
    if event == "start":
        record["command_started"] = COMMAND_STARTED.strftime(TIME_FORMAT)
    line = json.dumps(record)
    paths.invocations.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(paths.invocations, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (line + "\n").encode("utf-8"))  # one write: appended whole
    finally:
        os.close(descriptor)


@contextmanager
def recorded(paths: RunPaths, stage: Stage, problem_id: str) -> Iterator[None]:
    """Record the start and the end of one problem's generation or scoring around the block."""
    _append(paths, stage, problem_id, "start")
    try:
        yield
    finally:
        _append(paths, stage, problem_id, "end")


@dataclass(frozen=True)
class Period:
    """One problem's generation or scoring, from its start to its end (its start when it never ended)."""

    stage: Stage
    problem_id: str
    started: datetime
    ended: datetime
    command_started: datetime | None = None  # when the command that worked on it started (None: not recorded)


@dataclass(frozen=True)
class Invocation:
    """A period during which the run generated or scored: its start, end and what it did."""

    started: datetime
    ended: datetime
    stages: tuple[Stage, ...]
    problems: int

    @property
    def seconds(self) -> float:
        return (self.ended - self.started).total_seconds()

    def started_text(self) -> str:
        return self.started.strftime("%Y-%m-%dT%H:%M:%SZ")

    def ended_text(self) -> str:
        return self.ended.strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(text: object) -> datetime:
    return datetime.strptime(str(text), TIME_FORMAT).replace(tzinfo=timezone.utc)


def _event(line: str) -> tuple[tuple[Stage, str, int], Event, datetime, datetime | None] | None:
    """(stage, problem, process), event, time and the command's start of one line; None for a line that is not
    one (cut off)."""
    try:
        record = json.loads(line)
        stage = next(known for known in STAGES if known == record["stage"])
        event: Event = "start" if record["event"] == "start" else "end"
        at = _time(record["at"])
        command = _time(record["command_started"]) if "command_started" in record else None
        return (stage, str(record["problem_id"]), int(record["process"])), event, at, command
    except (ValueError, KeyError, TypeError, StopIteration):
        return None


def periods(paths: RunPaths) -> list[Period]:
    """Every recorded period, in start order."""
    try:
        lines = paths.invocations.read_text(encoding="utf-8").splitlines()
    except (FileNotFoundError, UnicodeDecodeError):
        return []
    found: list[Period] = []
    open_starts: dict[tuple[Stage, str, int], tuple[datetime, datetime | None]] = {}
    for parsed in filter(None, map(_event, lines)):
        key, event, at, command = parsed
        if event == "start":
            if key in open_starts:  # started again in the same process without an end: the first never ended
                begun, begun_command = open_starts[key]
                found.append(Period(key[0], key[1], begun, begun, begun_command))
            open_starts[key] = (at, command)
        elif key in open_starts:
            begun, begun_command = open_starts.pop(key)
            found.append(Period(key[0], key[1], begun, at, begun_command))
    found += [Period(key[0], key[1], at, at, command) for key, (at, command) in open_starts.items()]
    return sorted(found, key=lambda period: period.started)


def invocations(paths: RunPaths, problem_ids: Collection[str] | None = None) -> tuple[Invocation, ...]:
    """The run's invocations, in time order (empty for a run recorded before invocations were); with
    `problem_ids`, only the work on those problems (a subset's summary, beside other selections of the folder)."""
    groups: list[list[Period]] = []
    chosen = [period for period in periods(paths) if problem_ids is None or period.problem_id in problem_ids]
    for period in chosen:
        if groups and (period.started - max(p.ended for p in groups[-1])).total_seconds() <= MERGE_GAP_S:
            groups[-1].append(period)
        else:
            groups.append([period])
    return tuple(_invocation(group) for group in groups)


def _invocation(group: Sequence[Period]) -> Invocation:
    stages = tuple(stage for stage in STAGES if any(period.stage == stage for period in group))
    # the invocation starts with its command (select, the preflight, waiting for a slot), where that is recorded
    started = min(min(p.started, p.command_started or p.started) for p in group)
    return Invocation(started, max(p.ended for p in group), stages, len({p.problem_id for p in group}))
