"""Help for a model server on this machine or its network (the endpoint preflight's notes; none stops a run).

A local server (localhost, a loopback, private or link-local address in `base_url`) is usually one GPU or CPU
serving one model, and two of its defaults hurt a run where an API's would not:

- **No output cap.** Without `max_tokens=` such a server generates until its context is full (minutes per call);
  the note names the setting.
- **Fewer requests at once than `concurrency`.** A server that serves fewer requests at once than the run sends
  queues the others, and their wait is counted as model latency. How many it serves at once is read, in order,
  from what the server says (llama.cpp's `GET /props` `total_slots`, else the length of its `GET /slots` list,
  both at the server's root, not under `/v1`), else measured: QUEUE_PROBES tiny requests sent together, whose
  slowest wall against their fastest shows the queue (a server that serves them all at once ends them together).

Every reply is untrusted: read through the reply boundary (bounded body, a deadline), parsed totally; anything
unreadable, absent or out of range means "not said", never an exception.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit, urlunsplit

from stages.config.settings import Settings
from stages.execution.service_replies import ENDPOINT_REPLY_BYTES, bounded_client, reply_json, whole_count

if TYPE_CHECKING:
    from stages.generate.client import ModelClient

SLOTS_LIMIT = 100_000  # a reported slot count at or above this is not a count
SELF_REPORT_TIMEOUT_SECONDS = 5.0
QUEUE_PROBES = 4  # requests sent together to see whether the server queues them
QUEUE_RATIO = 1.8  # the slowest of them taking this many times the fastest is a queue ...
QUEUE_MIN_SPREAD_SECONDS = 0.3  # ... and this much longer (the jitter of instant answers on a loaded machine is not)
SUGGESTED_MAX_TOKENS = 4096
LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain"})
SlotsSource = Literal["GET /props", "GET /slots", "queueing"]
ProbeCall = Callable[["ModelClient"], object]  # one tiny request through the run's client


@dataclass(frozen=True)
class ServedAtOnce:
    """How many requests the server serves at once, and how that is known."""

    count: int
    source: SlotsSource
    detail: str = ""  # for a measured count, what was measured


def is_local_server(base_url: str) -> bool:
    """`base_url` names this machine or an address of a private network (not a public host name or address)."""
    try:
        host = (urlsplit(base_url).hostname or "").lower()
    except ValueError:
        return False
    if host in LOCAL_NAMES or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def max_tokens_note(settings: Settings) -> str | None:
    if settings.max_tokens is not None or not is_local_server(settings.base_url):
        return None
    return (
        f"note: max_tokens is unset and base_url={settings.base_url} is a local server, which then generates until "
        f"its context is full (minutes per call): set max_tokens= (e.g. max_tokens={SUGGESTED_MAX_TOKENS})"
    )


# ---------------------------------------------------------------------------
# What the server says
# ---------------------------------------------------------------------------


def server_root(base_url: str) -> str:
    """The server's origin (llama.cpp serves `/props` and `/slots` there, beside `/v1`)."""
    parts = urlsplit(base_url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def slots_in_props(data: object) -> int | None:
    count = whole_count(data.get("total_slots"), SLOTS_LIMIT) if isinstance(data, dict) else None
    return count if count else None


def slots_in_list(data: object) -> int | None:
    if not isinstance(data, list) or not data or len(data) >= SLOTS_LIMIT:
        return None
    return len(data) if all(isinstance(slot, dict) for slot in data) else None


SELF_REPORTS: tuple[tuple[SlotsSource, str, Callable[[object], int | None]], ...] = (
    ("GET /props", "/props", slots_in_props),
    ("GET /slots", "/slots", slots_in_list),
)


def _get_json(url: str) -> object:
    """The JSON of a 200 answer to GET `url`; None for anything else (no route, an error, unreadable)."""
    try:
        with bounded_client(ENDPOINT_REPLY_BYTES, timeout=SELF_REPORT_TIMEOUT_SECONDS) as http:
            response = http.get(url, headers={"Accept": "application/json"})
            if response.status_code != 200:
                return None
            return reply_json(response.content)
    except Exception:  # noqa: BLE001 - unreadable, refused, timed out (httpx2's own errors): "not said"
        return None


def reported_slots(base_url: str) -> ServedAtOnce | None:
    """The requests the server says it serves at once (SELF_REPORTS in order); None when it says nothing."""
    root = server_root(base_url)
    for source, path, read in SELF_REPORTS:
        count = read(_get_json(root + path))
        if count is not None:
            return ServedAtOnce(count, source)
    return None


# ---------------------------------------------------------------------------
# What queueing shows
# ---------------------------------------------------------------------------


def served_at_once_from_walls(walls: list[float]) -> int | None:
    """How many of `walls` (requests sent together) the server served at once: None when they ended close
    together (no queue seen), else the number that fit in the fastest one's time, at least 1."""
    fastest, slowest = (min(walls), max(walls)) if walls else (0.0, 0.0)
    if len(walls) < 2 or fastest <= 0 or slowest < max(QUEUE_RATIO * fastest, fastest + QUEUE_MIN_SPREAD_SECONDS):
        return None
    return max(1, round(len(walls) * fastest / slowest))


def measured_slots(client: ModelClient, count: int, probe: ProbeCall) -> ServedAtOnce | None:
    """Send `count` probe requests together (`probe(client)` is one); how many the server served at once, when the
    walls show a queue. A probe that fails makes the measure void (None)."""
    walls: list[float | None] = [None] * count

    def one(index: int) -> None:
        started = time.monotonic()
        try:
            probe(client)
        except Exception:  # noqa: BLE001 - a failed probe: no measure (the run's own calls report failures)
            return
        walls[index] = time.monotonic() - started

    threads = [threading.Thread(target=one, args=(index,), daemon=True) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    finished = [wall for wall in walls if wall is not None]
    if len(finished) < count:
        return None
    served = served_at_once_from_walls(finished)
    if served is None:
        return None
    detail = f"{count} requests sent together took {min(finished):.1f} s to {max(finished):.1f} s"
    return ServedAtOnce(served, "queueing", detail)


def concurrency_note(settings: Settings, client: ModelClient, probe: ProbeCall) -> str | None:
    """A note when a local server serves fewer requests at once than `concurrency`; None otherwise."""
    if settings.concurrency < 2 or not is_local_server(settings.base_url):
        return None
    served = reported_slots(settings.base_url) or measured_slots(client, min(settings.concurrency, QUEUE_PROBES), probe)
    if served is None or served.count >= settings.concurrency:
        return None
    if served.source == "queueing":
        how = f"about {served.count} request(s) at once ({served.detail})"
    else:
        how = f"{served.count} request(s) at once ({served.source})"
    return (
        f"note: the server at {settings.base_url} serves {how} and concurrency={settings.concurrency}: the other "
        f"requests wait in its queue and that wait counts as model latency; set concurrency={served.count} (or "
        "start the server with more parallel slots)"
    )


def local_server_notes(settings: Settings, client: ModelClient, probe: ProbeCall) -> list[str]:
    """The preflight's notes for a local server (module docstring); empty for any other endpoint."""
    notes = (max_tokens_note(settings), concurrency_note(settings, client, probe))
    return [note for note in notes if note]
