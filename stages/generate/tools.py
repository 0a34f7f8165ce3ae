"""The `code_interpreter` tool offered to models in tool_use mode.

One call runs one snippet (`execution_preamble` + code) and returns its stdout then stderr, truncated
to OUTPUT_LIMIT characters with a marker saying so. Two back ends:

- local (default): a fresh interpreter (`python_binary`, as given: a venv's `bin/python` runs with that venv's
  packages) in its own temp dir under `code_workdir` (removed afterwards), confined by the kernel
  (`stages/execution/confinement/confine.py`): PID 1 of new PID/network/IPC/mount namespaces, so every process it
  starts dies with it; its folder a tmpfs of `scratch_limit_mb` (at most the memory limit) holding a copy of
  the files written here, so what the snippet writes vanishes with it; Landlock reads only of the
  interpreter's files and the snippet's folder (no data folder, no targets file, no /proc, no home), writes
  only in that folder, no TCP; no capabilities; the seccomp filter; memory ceiling `sandbox_memory_limit_mb`;
  a scrubbed environment (no API keys). Its session is killed as a whole at `code_timeout_seconds` (output so
  far kept). A refused action fails inside the snippet with the operating system's error (PermissionError,
  "Network is unreachable", "No space left on device"), which the model sees in the output.
- SandboxFusion-compatible service (`sandbox_url` set): POST `<sandbox_url>/run_code` through the reply boundary
  (`stages.execution.service_replies`: a reply of at most SANDBOX_REPLY_BYTES, within `code_timeout_seconds +
  sandbox_api_timeout_seconds` for the whole call), with retries on 5xx, connection errors, a reply not whole in
  time and sandbox-side failures; a service that keeps failing gives status `sandbox_error` (the model sees the
  message and the step goes on).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stages.config.settings import Settings
from stages.execution import live_processes
from stages.execution.confinement import CONFINE_SCRIPT, binding_arguments
from stages.execution.isolation import Limits, ProcessResult, ScratchDir, run_isolated, scrubbed_environment
from stages.execution.safe_ast import MAX_PARSED_CHARS
from stages.execution.untrusted import UntrustedJSONError, parse_json, valid_text
from stages.statuses import ToolStatus
from stages.storage.json_values import JSONObject, JSONValue

CODE_INTERPRETER = "code_interpreter"
OUTPUT_LIMIT = 20_000  # characters of output returned to the model
OUTPUT_TAIL = 2_000  # of which the last characters are kept, so a final traceback stays visible
CAPTURE_BYTES = OUTPUT_LIMIT * 4  # bytes kept per stream by the process runner (UTF-8 worst case)
MAX_ARGUMENT_CHARS = 2 * MAX_PARSED_CHARS  # a call's JSON arguments (its code, escaped) longer than this are refused
SNIPPET_FILE = "snippet.py"
RUNNER_FILE = "_runner.py"
PREAMBLE_FILE = "_preamble.py"
SINGLE_THREAD_DEFAULTS: dict[str, str] = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

TOOL_DESCRIPTION = (
    "Run a Python 3 snippet in a fresh interpreter and return its stdout and stderr "
    f"(at most {OUTPUT_LIMIT} characters). Each call starts from scratch: define everything the snippet "
    "uses. numpy, scipy and sympy are available; print what you want to see. No network, no "
    "subprocesses, and the benchmark's data files are not accessible."
)
CODE_PARAMETERS: JSONObject = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "Python source code to execute."}},
    "required": ["code"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class ToolOutcome:
    output: str
    status: ToolStatus
    duration_s: float
    truncated: bool


# ---------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------

TOOL_SPECS: dict[str, tuple[str, JSONObject]] = {CODE_INTERPRETER: (TOOL_DESCRIPTION, CODE_PARAMETERS)}


def tool_schemas(tool_names: Iterable[str], protocol: str) -> list[JSONObject]:
    """The `tools` request parameter for `protocol` (openai-chat or openai-responses)."""
    schemas: list[JSONObject] = []
    for name in tool_names:
        if name not in TOOL_SPECS:
            raise ValueError(f"unknown tool {name!r}: available tools are {', '.join(TOOL_SPECS)}")
        description, parameters = TOOL_SPECS[name]
        spec: JSONObject = {"name": name, "description": description, "parameters": parameters}
        if protocol == "openai-chat":
            schemas.append({"type": "function", "function": spec})
        elif protocol == "openai-responses":
            schemas.append({"type": "function", **spec})
        else:
            raise ValueError(f"unknown api protocol {protocol!r}: expected openai-chat or openai-responses")
    return schemas


# ---------------------------------------------------------------------------
# Output shaping
# ---------------------------------------------------------------------------


def join_streams(stdout: str, stderr: str) -> str:
    if stdout and stderr and not stdout.endswith("\n"):
        return stdout + "\n" + stderr
    return stdout + stderr


def truncate_output(text: str, total_bytes: int | None = None) -> tuple[str, bool]:
    """Keep the head and the last OUTPUT_TAIL characters of `text`, with a marker in between."""
    captured_all = total_bytes is None or total_bytes <= len(text.encode("utf-8", errors="replace"))
    if len(text) <= OUTPUT_LIMIT and captured_all:
        return text, False
    size = f"{total_bytes} bytes" if total_bytes is not None else f"{len(text)} characters"
    if len(text) <= OUTPUT_LIMIT:
        return text + f"\n[... output truncated: the snippet wrote {size} in all ...]\n", True
    head = text[: OUTPUT_LIMIT - OUTPUT_TAIL]
    tail = text[-OUTPUT_TAIL:]
    marker = (
        f"\n[... output truncated: the snippet wrote {size}; showing the first {len(head)} "
        f"and the last {len(tail)} characters ...]\n"
    )
    return head + marker + tail, True


def with_note(output: str, note: str) -> str:
    separator = "" if not output or output.endswith("\n") else "\n"
    return f"{output}{separator}[code_interpreter: {note}]"


# ---------------------------------------------------------------------------
# Local execution, confined by the kernel
# ---------------------------------------------------------------------------

RUNNER_SOURCE = """\
import builtins, sys, traceback
with open(%(preamble)r, encoding="utf-8") as handle:
    preamble = handle.read()
with open(%(snippet)r, encoding="utf-8") as handle:
    snippet = handle.read()
sys.argv = [%(snippet)r]
namespace = {"__name__": "__main__", "__builtins__": builtins, "__file__": %(snippet)r}
try:
    exec(compile(preamble, "<execution_preamble>", "exec"), namespace)
    exec(compile(snippet, %(snippet)r, "exec"), namespace)
except SystemExit:
    raise
except BaseException as error:
    lines = traceback.format_exception(type(error), error, error.__traceback__)
    sys.stderr.write("".join(line for line in lines if %(runner)r not in line))
    sys.exit(1)
""" % {"preamble": PREAMBLE_FILE, "snippet": SNIPPET_FILE, "runner": RUNNER_FILE}  # noqa: UP031 (the program holds braces)


def snippet_scratch_limit_mb(settings: Settings) -> int:
    """The size of a snippet's tmpfs folder: `scratch_limit_mb`, at most the snippet's memory limit (it is memory)."""
    memory = settings.sandbox_memory_limit_mb
    return min(settings.scratch_limit_mb, memory) if memory else settings.scratch_limit_mb


LAUNCHER_BACKSTOP_GRACE_SECONDS = 5.0  # past code_timeout_seconds, the launcher kills the snippet itself


def launcher_time_bound(settings: Settings) -> float:
    """The launcher's own bound on a snippet: `code_timeout_seconds` plus a grace, so the pipeline's timeout (which
    keeps the output so far) acts first and the launcher's only when the pipeline could not (it was killed)."""
    return settings.code_timeout_seconds + LAUNCHER_BACKSTOP_GRACE_SECONDS


def confined_command(folder: Path, settings: Settings) -> list[str]:
    """`python_binary confine.py --scratch <folder> --scratch-limit-mb S --memory-mb N --timeout-seconds T
    [--seccomp-binding P] --python -- -u runner.py`."""
    memory = settings.sandbox_memory_limit_mb or 0
    return [
        settings.python_binary,
        str(CONFINE_SCRIPT),
        "--scratch",
        str(folder.resolve()),
        "--scratch-limit-mb",
        str(snippet_scratch_limit_mb(settings)),
        "--memory-mb",
        str(memory),
        "--timeout-seconds",
        repr(launcher_time_bound(settings)),
        *binding_arguments(),
        "--python",
        "--",
        "-u",
        RUNNER_FILE,
    ]


def snippet_environment(folder: Path, settings: Settings) -> dict[str, str]:
    extra = {name: value for name, value in SINGLE_THREAD_DEFAULTS.items() if name not in os.environ}
    extra["MPLCONFIGDIR"] = str(folder / ".matplotlib")  # the only writable place is the snippet's folder
    return scrubbed_environment(extra, home=folder)


def outcome_from_process(result: ProcessResult, timeout_seconds: float) -> ToolOutcome:
    output, truncated = truncate_output(
        join_streams(result.stdout, result.stderr), result.stdout_bytes + result.stderr_bytes
    )
    if result.timed_out:
        note = f"execution timed out after {timeout_seconds:g} s and was stopped; the output so far is shown"
        return ToolOutcome(with_note(output, note), "timeout", result.duration_s, truncated)
    if result.returncode == 0:
        return ToolOutcome(output or with_note("", "finished with no output"), "ok", result.duration_s, truncated)
    signal_number = result.killed_by_signal
    note = f"killed by signal {signal_number}" if signal_number else f"exited with status {result.returncode}"
    return ToolOutcome(with_note(output, note), "error", result.duration_s, truncated)


def run_local(code: str, settings: Settings) -> ToolOutcome:
    limits = Limits(
        timeout_seconds=settings.code_timeout_seconds,
        memory_mb=settings.sandbox_memory_limit_mb,
        output_limit_bytes=CAPTURE_BYTES,
    )
    with ScratchDir(Path(settings.code_workdir), prefix="snippet-") as folder:
        (folder / SNIPPET_FILE).write_text(code, encoding="utf-8")
        (folder / PREAMBLE_FILE).write_text(settings.execution_preamble, encoding="utf-8")
        (folder / RUNNER_FILE).write_text(RUNNER_SOURCE, encoding="utf-8")
        try:
            result = run_isolated(
                confined_command(folder, settings), cwd=folder, env=snippet_environment(folder, settings), limits=limits
            )
        except OSError as error:
            return ToolOutcome(with_note("", f"could not start {settings.python_binary}: {error}"), "error", 0.0, False)
    return outcome_from_process(result, settings.code_timeout_seconds)


# ---------------------------------------------------------------------------
# SandboxFusion-compatible service
# ---------------------------------------------------------------------------


class SandboxUnavailable(Exception):
    """The sandbox service failed in a way worth retrying (5xx, connection error, no whole reply in time,
    sandbox-side error)."""


class SandboxRefused(Exception):
    """The sandbox service rejected the request (4xx, a reply that is unreadable or not read): retrying will not
    help."""


@functools.lru_cache(maxsize=2)
def sandbox_client(no_proxy: bool) -> Any:
    """The bounded HTTP client of /run_code calls (`stages.execution.service_replies`; replies of at most
    SANDBOX_REPLY_BYTES); `no_proxy` ignores the proxy variables of the environment (`sandbox_no_proxy`)."""
    from stages.execution.service_replies import SANDBOX_REPLY_BYTES, bounded_client

    return bounded_client(SANDBOX_REPLY_BYTES, trust_env=not no_proxy)


# What the sandbox runs: single-threaded BLAS set before anything can import numpy (SandboxFusion turns
# memory_limit_MB into address-space and stack limits, under which OpenBLAS cannot start its threads and
# `import numpy` dies), then the preamble and the snippet compiled under their own names, as locally, so
# line numbers, `from __future__` imports and tracebacks are the snippet's own. Each stream passes on its
# first CAPTURE_BYTES bytes only and the byte totals follow in a last stderr line: SandboxFusion reads the
# pipes only after the process ends, so a snippet that writes much more blocks until the time limit.
OUTPUT_TOTALS_MARKER = "\n[scicode-output-bytes "
SANDBOX_RUNNER_TEMPLATE = """\
import os
for _name, _value in __THREAD_DEFAULTS__.items():
    os.environ.setdefault(_name, _value)
import io, linecache, sys, traceback

class _Bounded(io.TextIOBase):
    def __init__(self, raw):
        self.raw, self.kept, self.total = raw, 0, 0
    def writable(self):
        return True
    def write(self, text):
        data = str(text).encode("utf-8", "replace")
        self.total += len(data)
        room = __CAPTURE_BYTES__ - self.kept
        if room > 0:
            self.raw.write(data[:room])
            self.raw.flush()
            self.kept += min(room, len(data))
        return len(text)

_out, _err = _Bounded(sys.stdout.buffer), _Bounded(sys.stderr.buffer)
sys.stdout, sys.stderr = _out, _err
_namespace = {"__name__": "__main__", "__builtins__": __builtins__, "__file__": __SNIPPET_NAME__}
_source = __SNIPPET__
linecache.cache[__SNIPPET_NAME__] = (len(_source), None, _source.splitlines(True), __SNIPPET_NAME__)
try:
    exec(compile(__PREAMBLE__, "<execution_preamble>", "exec"), _namespace)
    exec(compile(_source, __SNIPPET_NAME__, "exec"), _namespace)
except SystemExit:
    raise
except BaseException as _error:
    _own = '  File "' + __file__ + '"'
    _lines = traceback.format_exception(type(_error), _error, _error.__traceback__)
    sys.stderr.write("".join(line for line in _lines if not line.startswith(_own)))
    sys.exit(1)
finally:
    _err.raw.write((__TOTALS_MARKER__ + str(_out.total) + " " + str(_err.total) + "]\\n").encode())
    _err.raw.flush()
"""


def sandbox_program(code: str, settings: Settings) -> str:
    """The Python program sent to the sandbox for one snippet (see SANDBOX_RUNNER_TEMPLATE)."""
    replacements = {
        "__THREAD_DEFAULTS__": repr(SINGLE_THREAD_DEFAULTS),
        "__SNIPPET_NAME__": repr(SNIPPET_FILE),
        "__PREAMBLE__": repr(settings.execution_preamble),
        "__SNIPPET__": repr(code),
        "__CAPTURE_BYTES__": repr(CAPTURE_BYTES),
        "__TOTALS_MARKER__": repr(OUTPUT_TOTALS_MARKER),
    }
    # One pass, so a snippet that contains a placeholder's text is never substituted into.
    return re.sub(
        "|".join(map(re.escape, replacements)), lambda match: replacements[match.group(0)], SANDBOX_RUNNER_TEMPLATE
    )


def sandbox_payload(code: str, settings: Settings) -> JSONObject:
    """The /run_code request; `sandbox_memory_limit_mb=0` sends no limit at all."""
    payload: JSONObject = {
        "code": sandbox_program(code, settings),
        "language": "python",
        "run_timeout": settings.code_timeout_seconds,
    }
    if settings.sandbox_memory_limit_mb:
        payload["memory_limit_MB"] = settings.sandbox_memory_limit_mb
    return payload


def sandbox_deadline_seconds(settings: Settings) -> float:
    """The deadline of one /run_code call, connecting and the whole reply included: the run itself, plus the API
    allowance."""
    return settings.code_timeout_seconds + settings.sandbox_api_timeout_seconds


def tool_run_deadline_seconds(settings: Settings) -> float:
    """The longest one code_interpreter call can take: `code_timeout_seconds` locally; with a sandbox, every
    attempt's deadline and the delays between them."""
    if not settings.sandbox_url:
        return settings.code_timeout_seconds
    attempts = settings.sandbox_max_retries + 1
    return (
        attempts * sandbox_deadline_seconds(settings)
        + settings.sandbox_max_retries * settings.sandbox_retry_delay_seconds
    )


def _text_field(value: JSONValue) -> str:
    return value if isinstance(value, str) else ""


def _object_field(value: JSONValue) -> JSONObject:
    return value if isinstance(value, dict) else {}


def post_run_code(code: str, settings: Settings) -> JSONObject:
    """One POST to `<sandbox_url>/run_code` through the reply boundary; the reply JSON (an object with a
    `run_result` object), or SandboxUnavailable / SandboxRefused."""
    import httpx2

    from stages.execution.service_replies import ReplyRefused, UnreadableReply, reply_json, reply_text

    url = settings.sandbox_url.rstrip("/") + "/run_code"
    deadline = sandbox_deadline_seconds(settings)
    try:
        response = sandbox_client(settings.sandbox_no_proxy).post(
            url, json=sandbox_payload(code, settings), timeout=deadline
        )
    except ReplyRefused as error:
        raise SandboxRefused(f"reply from {url} not read: {error}") from None
    except httpx2.TimeoutException:
        raise SandboxUnavailable(
            f"no whole reply from {url} within {deadline:g} s (code_timeout_seconds + sandbox_api_timeout_seconds)"
        ) from None
    except (httpx2.HTTPError, httpx2.InvalidURL, OSError) as error:
        raise SandboxUnavailable(f"cannot reach {url}: {error or type(error).__name__}") from None
    status = response.status_code
    if status >= 300:
        detail = " ".join(reply_text(response.content[:300]).split())
        problem = f"HTTP {status} from {url}: {detail}"
        raise SandboxUnavailable(problem) if status >= 500 else SandboxRefused(problem)
    try:
        reply = reply_json(response.content)
    except UnreadableReply as error:
        raise SandboxRefused(f"unreadable reply from {url}: {error}") from None
    if not isinstance(reply, dict):
        raise SandboxRefused(f"unreadable reply from {url}: not a JSON object")
    if reply.get("status") == "SandboxError" or not isinstance(reply.get("run_result"), dict):
        detail = _text_field(reply.get("message")) or _text_field(reply.get("status")) or "no run result"
        raise SandboxUnavailable(f"sandbox error from {url}: {detail[:300]}")
    return reply


def split_output_totals(stderr: str) -> tuple[str, int | None]:
    """stderr without the runner's last line of byte totals, and the total bytes the snippet wrote (None if absent)."""
    head, marker, tail = stderr.rpartition(OUTPUT_TOTALS_MARKER)
    if not marker:
        return stderr, None
    try:
        stdout_total, stderr_total = (int(part) for part in tail.strip().rstrip("]").split())
    except ValueError:
        return stderr, None
    if stdout_total < 0 or stderr_total < 0:
        return stderr, None
    return head, stdout_total + stderr_total


def _return_code(value: JSONValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def outcome_from_sandbox(reply: JSONObject, duration_s: float, timeout_seconds: float) -> ToolOutcome:
    """The outcome a /run_code reply states; any field of the wrong type reads as absent (no output, no return
    code), so a reply that lies about its types is an `error`, never an `ok` it did not state."""
    run = _object_field(reply.get("run_result"))
    stdout, stderr = _text_field(run.get("stdout")), _text_field(run.get("stderr"))
    stderr, total_bytes = split_output_totals(stderr)
    output, truncated = truncate_output(join_streams(stdout, stderr), total_bytes)
    run_status = _text_field(run.get("status"))
    return_code = _return_code(run.get("return_code"))
    if run_status == "TimeLimitExceeded":
        note = f"execution timed out after {timeout_seconds:g} s and was stopped; the output so far is shown"
        return ToolOutcome(with_note(output, note), "timeout", duration_s, truncated)
    if run_status == "Finished" and return_code == 0:
        return ToolOutcome(output or with_note("", "finished with no output"), "ok", duration_s, truncated)
    if run_status == "Finished":
        code = "unknown" if return_code is None else str(return_code)
        return ToolOutcome(with_note(output, f"exited with status {code}"), "error", duration_s, truncated)
    detail = (_text_field(reply.get("message")) or run_status or "an unknown status")[:300]
    return ToolOutcome(with_note(output, f"run ended with {detail}"), "error", duration_s, truncated)


def run_in_sandbox(code: str, settings: Settings) -> ToolOutcome:
    started = time.monotonic()
    attempts = settings.sandbox_max_retries + 1
    last_problem = ""
    for attempt in range(attempts):
        if attempt:
            time.sleep(settings.sandbox_retry_delay_seconds)
        try:
            reply = post_run_code(code, settings)
        except SandboxUnavailable as problem:
            last_problem = str(problem)
            continue
        except SandboxRefused as problem:
            last_problem = str(problem)
            break
        return outcome_from_sandbox(reply, time.monotonic() - started, settings.code_timeout_seconds)
    else:
        last_problem = f"{last_problem} (gave up after {attempts} attempts)"
    note = f"the code sandbox failed, the snippet was not run: {last_problem}"
    return ToolOutcome(with_note("", note), "sandbox_error", time.monotonic() - started, False)


# ---------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------


def parse_code_argument(arguments: str) -> str:
    """The `code` argument of a code_interpreter call (lone surrogates replaced); ValueError with a message for
    the model when the arguments are not a JSON object with a string "code" of at most MAX_ARGUMENT_CHARS.
    Control characters inside strings are accepted (llama-cpp-python's function-calling format writes the code's
    line breaks raw)."""
    try:
        parsed = parse_json(arguments, MAX_ARGUMENT_CHARS, strict=False) if arguments and arguments.strip() else None
    except UntrustedJSONError as error:
        raise ValueError(f'the arguments are not accepted: {error}; send {{"code": "..."}}') from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("code"), str):
        raise ValueError('the arguments must be a JSON object with a string field "code"')
    return valid_text(parsed["code"])


def run_tool(name: str, arguments: str, settings: Settings) -> ToolOutcome:
    """Run one tool call; every failure is an outcome the model can read, never an exception (but
    RunInterrupted once the run is being stopped: a snippet killed by the stop is not an outcome)."""
    live_processes.raise_if_stopping()
    if name != CODE_INTERPRETER or name not in settings.tool_names:
        available = ", ".join(settings.tool_names) or "none"
        return ToolOutcome(with_note("", f"unknown tool {name!r}; available tools: {available}"), "error", 0.0, False)
    try:
        code = parse_code_argument(arguments)
    except ValueError as error:
        return ToolOutcome(with_note("", str(error)), "error", 0.0, False)
    outcome = run_in_sandbox(code, settings) if settings.sandbox_url else run_local(code, settings)
    live_processes.raise_if_stopping()
    return dataclasses.replace(outcome, output=valid_text(outcome.output))  # a sandbox reply may hold any str
