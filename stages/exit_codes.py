"""The exit codes of a run that stops before or during its work, one line each (docs/running-safely.md).

One table, so that the code that stops a run and the README name the same numbers. 1 is doit's own (a task
failed: the run went on and its summary says what failed); the others end the run at once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExitCode:
    code: int
    meaning: str


CONFIG_ERROR = ExitCode(3, "a variable, value or preflight check (sandbox, targets) is wrong; no model was called")
RUN_LOCKED = ExitCode(4, "another run holds the run folder's lock")
UNWRITABLE = ExitCode(5, "a results or data folder cannot be written")
NO_API_KEY = ExitCode(20, "no API key for an endpoint that is not on this machine")
ENDPOINT_UNREACHABLE = ExitCode(21, "nothing answers at base_url (connection refused, unknown host, timeout)")
KEY_REFUSED = ExitCode(22, "the endpoint refused the key (HTTP 401/403), in the preflight or mid-run")
MODEL_NOT_SERVED = ExitCode(23, "the endpoint does not serve model= (GET /models lists others, or HTTP 404)")
PROTOCOL_NOT_SERVED = ExitCode(24, "the endpoint does not answer a one-line request of api_protocol=")
TOOLS_REFUSED = ExitCode(25, "in tool_use, the endpoint refuses a request that offers tools (or tool_choice=)")
SCHEDULER_UNREACHABLE = ExitCode(26, "the Dask scheduler= does not accept connections")

EXIT_CODES: tuple[ExitCode, ...] = (
    CONFIG_ERROR,
    RUN_LOCKED,
    UNWRITABLE,
    NO_API_KEY,
    ENDPOINT_UNREACHABLE,
    KEY_REFUSED,
    MODEL_NOT_SERVED,
    PROTOCOL_NOT_SERVED,
    TOOLS_REFUSED,
    SCHEDULER_UNREACHABLE,
)
