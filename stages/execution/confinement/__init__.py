"""Kernel confinement of processes that run model-written code (`confine.py`), as the pipeline sees it.

`confinement_of(python_binary)` asks that interpreter what a confined process gets on this machine (one
probe per interpreter and process); config.json and the summary carry its one-line description, and
`confinement=required` refuses to start without full confinement (`check_confinement`).

`seccomp_binding()` is the path of the pipeline's own `pyseccomp` module: every confined process loads it by
path (see confine.py), so `python_binary` needs no copy of its own.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from functools import lru_cache
from pathlib import Path

CONFINE_SCRIPT = Path(__file__).resolve().parent / "confine.py"
PROBE_TIMEOUT_SECONDS = 120
DEFAULT_SCRATCH_LIMIT_MB = 512  # the `scratch_limit_mb` setting's default


FULL_CONFINEMENT = (
    "Landlock ABI >= 6, PID and mount namespaces, a seccomp filter (the pyseccomp binding over the system's "
    "libseccomp2) and a size-limited tmpfs scratch"
)


class ConfinementUnavailable(RuntimeError):
    """`confinement=required` on a machine that cannot give full confinement; one line."""


@lru_cache(maxsize=1)
def seccomp_binding() -> str | None:
    """The file of the `pyseccomp` module in the pipeline's environment (found, not imported); None without it."""
    try:
        spec = importlib.util.find_spec("pyseccomp")
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return origin if origin and origin.endswith(".py") else None


def binding_arguments() -> list[str]:
    """`--seccomp-binding PATH` for the programs that confine themselves, or nothing."""
    path = seccomp_binding()
    return ["--seccomp-binding", path] if path else []


@lru_cache(maxsize=8)
def confinement_of(python_binary: str) -> dict[str, object]:
    """The probe's record (`description`, `full`, Landlock ABI, namespaces, capabilities): its JSON, read only
    by what it says (`check_confinement`)."""
    from stages.execution.isolation import scrubbed_environment

    try:
        result = subprocess.run(
            [python_binary, str(CONFINE_SCRIPT), "--probe", *binding_arguments()],
            capture_output=True,
            text=True,
            env=scrubbed_environment(),
            timeout=PROBE_TIMEOUT_SECONDS,
            check=False,
        )
        record = json.loads(result.stdout.strip().splitlines()[-1]) if result.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as error:
        return {"description": f"none (the confinement probe failed: {error})", "full": False}
    if not isinstance(record, dict):
        reason = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        return {"description": f"none (the confinement probe failed: {reason[:200]})", "full": False}
    return record


def check_confinement(required: str, python_binary: str) -> str:
    """The description of what model code runs under; ConfinementUnavailable when `required` is not met."""
    record = confinement_of(python_binary)
    description = str(record.get("description", "none"))
    if required == "required" and not record.get("full"):
        raise ConfinementUnavailable(
            f"confinement=required, but model code here would run under: {description} (full confinement needs "
            f"{FULL_CONFINEMENT}; use confinement=auto to run with what is available)"
        )
    return description
