"""The reply journal: a finished model call's reply is saved as it arrives, before anything parses it.

`<run>/replies/<id>.jsonl` (`<id>@<attempt>.jsonl` for later attempts, `RunPaths.replies`) holds the replies of
the step a problem is generating (a problem's steps are generated one at a time): one JSON line per 2xx reply
(the step, its prompt fingerprint, the call's number in the step, the body as text, the headers its record uses,
the latency), appended and flushed to the disk before the reply is parsed. Once the step's record is in the
generation file, the journal is removed. A step whose handling failed after a reply arrived (status `error`)
keeps it: when that step is asked again, every call whose reply the journal holds (same step, same prompt
fingerprint, same call number) reads it back instead of asking the endpoint, so a paid answer is not bought
twice. A reply read back that does not parse is asked for again, as the client retries a malformed reply; the
tool calls between two replies are run again. The call's record says `replayed`.

A failure of the pipeline's own while handling the replies (anything but a file that cannot be written, which a
rerun may well get past) appends an unhandled mark for the step: its replies stay in the file, and they are never
read back into the same failure. The step is then recorded as an error naming the journal, without a model call,
until `reask_unhandled_replies=true` asks the endpoint again (a paid call; the replies after the mark are read back
as usual).

The journal is the pipeline's own file; a line that does not read back (a write cut short by a crash) is skipped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stages.execution.untrusted import valid_text

ENTRY_FIELDS = ("step_id", "prompt_fingerprint", "call", "body", "headers", "latency_s")


@dataclass(frozen=True)
class ReceivedReply:
    """A 2xx reply as it arrived, before anything reads it: its body as text, the headers the call's record uses
    and the request's latency."""

    body: str
    headers: Mapping[str, str]
    latency_s: float


@dataclass(frozen=True)
class JournalEntry:
    """One line of the journal: which call of which step (and prompt) the reply answered."""

    step_id: str
    prompt_fingerprint: str
    call: int
    reply: ReceivedReply

    def answers(self, step_id: str, prompt_fingerprint: str, call: int) -> bool:
        return (self.step_id, self.prompt_fingerprint, self.call) == (step_id, prompt_fingerprint, call)


@dataclass(frozen=True)
class UnhandledMark:
    """A line saying that handling the step's replies above it failed (`reason`): they are not read back."""

    step_id: str
    prompt_fingerprint: str
    reason: str


UNHANDLED_KEY = "unhandled"


def _line(line: str) -> JournalEntry | UnhandledMark | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if (
        isinstance(entry, dict)
        and isinstance(entry.get(UNHANDLED_KEY), str)
        and isinstance(entry.get("step_id"), str)
        and isinstance(entry.get("prompt_fingerprint"), str)
    ):
        return UnhandledMark(entry["step_id"], entry["prompt_fingerprint"], entry[UNHANDLED_KEY])
    return _entry(entry)


def _entry(entry: object) -> JournalEntry | None:
    if not isinstance(entry, dict) or any(name not in entry for name in ENTRY_FIELDS):
        return None
    headers = entry["headers"]
    valid = (
        isinstance(entry["step_id"], str)
        and isinstance(entry["prompt_fingerprint"], str)
        and isinstance(entry["call"], int)
        and isinstance(entry["body"], str)
        and isinstance(headers, dict)
        and all(isinstance(value, str) for value in headers.values())
        and isinstance(entry["latency_s"], (int, float))
    )
    if not valid:
        return None
    reply = ReceivedReply(entry["body"], dict(headers), float(entry["latency_s"]))
    return JournalEntry(entry["step_id"], entry["prompt_fingerprint"], entry["call"], reply)


@dataclass
class ReplyJournal:
    """The journal of one problem's attempt (see the module docstring)."""

    path: Path
    _entries: list[JournalEntry | UnhandledMark] | None = field(default=None, repr=False)

    def _read(self) -> list[JournalEntry | UnhandledMark]:
        if self._entries is None:
            try:
                lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
            except FileNotFoundError:
                lines = []
            self._entries = [entry for line in lines if (entry := _line(line)) is not None]
        return self._entries

    def recorded(self, step_id: str, prompt_fingerprint: str, call: int) -> ReceivedReply | None:
        """The last reply saved for call number `call` of the step since the step's last unhandled mark, if any."""
        for entry in reversed(self._read()):
            if isinstance(entry, UnhandledMark) and (entry.step_id, entry.prompt_fingerprint) == (
                step_id,
                prompt_fingerprint,
            ):
                return None
            if isinstance(entry, JournalEntry) and entry.answers(step_id, prompt_fingerprint, call):
                return entry.reply
        return None

    def unhandled(self, step_id: str, prompt_fingerprint: str) -> str | None:
        """Why handling the step's replies failed, when the step's last line is an unhandled mark (no reply
        arrived after it); None otherwise."""
        for entry in reversed(self._read()):
            if (entry.step_id, entry.prompt_fingerprint) == (step_id, prompt_fingerprint):
                return entry.reason if isinstance(entry, UnhandledMark) else None
        return None

    def holds_replies(self, step_id: str, prompt_fingerprint: str) -> bool:
        return any(
            isinstance(entry, JournalEntry)
            and (entry.step_id, entry.prompt_fingerprint) == (step_id, prompt_fingerprint)
            for entry in self._read()
        )

    def mark_unhandled(self, step_id: str, prompt_fingerprint: str, reason: str) -> None:
        """Append a mark: handling the step's replies failed for `reason`; they stay in the file, never read back
        (OSError when the run folder cannot be written)."""
        line = {"step_id": step_id, "prompt_fingerprint": prompt_fingerprint, UNHANDLED_KEY: valid_text(reason)}
        self._append(line)
        self._read().append(UnhandledMark(step_id, prompt_fingerprint, valid_text(reason)))

    def _append(self, line: Mapping[str, object]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def record(self, step_id: str, prompt_fingerprint: str, call: int, reply: ReceivedReply) -> None:
        """Append the reply and flush it to the disk (OSError when the run folder cannot be written)."""
        kept = ReceivedReply(
            valid_text(reply.body), {name: valid_text(value) for name, value in reply.headers.items()}, reply.latency_s
        )
        line = {
            "step_id": step_id,
            "prompt_fingerprint": prompt_fingerprint,
            "call": call,
            "body": kept.body,
            "headers": dict(kept.headers),
            "latency_s": kept.latency_s,
        }
        self._append(line)
        self._read().append(JournalEntry(step_id, prompt_fingerprint, call, kept))

    def clear(self) -> None:
        """Forget every reply (the step they answered is recorded in the generation file)."""
        self.path.unlink(missing_ok=True)
        self._entries = []


@dataclass(frozen=True)
class StepReplies:
    """The journal as one step sees it: its calls by number."""

    journal: ReplyJournal
    step_id: str
    prompt_fingerprint: str

    def recorded(self, call: int) -> ReceivedReply | None:
        return self.journal.recorded(self.step_id, self.prompt_fingerprint, call)

    def record(self, call: int, reply: ReceivedReply) -> None:
        self.journal.record(self.step_id, self.prompt_fingerprint, call, reply)

    def unhandled(self) -> str | None:
        return self.journal.unhandled(self.step_id, self.prompt_fingerprint)

    def mark_unhandled(self, reason: str) -> bool:
        """Mark the step's journaled replies as unhandled (`reason`) when it holds any; True when it did (a folder
        that cannot be written leaves them to be read back, as before)."""
        if not self.journal.holds_replies(self.step_id, self.prompt_fingerprint):
            return False
        try:
            self.journal.mark_unhandled(self.step_id, self.prompt_fingerprint, reason)
        except OSError:
            return False
        return True

    @property
    def path(self) -> Path:
        return self.journal.path
