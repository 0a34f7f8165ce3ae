"""What a step runs under: the interpreter, the time and memory limits, the scratch limit and the confinement.

`StepLimits` is built once per `run_score` from the settings and is both a part of every verdict-cache key
(`key_parts`: a verdict stays valid only under the limits it was reached with) and a field of every step job
(what the engine launches the step's processes with).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from stages.execution.confinement import DEFAULT_SCRATCH_LIMIT_MB, check_confinement
from stages.storage.json_values import JSONValue

if TYPE_CHECKING:
    from stages.config.settings import Settings


@dataclass(frozen=True)
class StepLimits:
    """`confinement` is the description of what model code runs under (`check_confinement`), as the cache
    key records it; the processes confine themselves."""

    python_binary: str
    timeout_seconds: float
    memory_mb: int | None
    confinement: str
    scratch_limit_mb: int = DEFAULT_SCRATCH_LIMIT_MB

    @classmethod
    def of(cls, settings: Settings) -> StepLimits:
        """The limits of every step of a run of these settings (the confinement probed once per interpreter)."""
        return cls(
            python_binary=settings.python_binary,
            timeout_seconds=settings.step_timeout_seconds,
            memory_mb=settings.step_memory_mb,
            confinement=check_confinement("auto", settings.python_binary),
            scratch_limit_mb=settings.scratch_limit_mb,
        )

    def key_parts(self) -> dict[str, JSONValue]:
        """The verdict-cache key's fields for these limits (the interpreter enters the key through its versions)."""
        return {
            "timeout": self.timeout_seconds,
            "memory_mb": self.memory_mb,
            "scratch_limit_mb": self.scratch_limit_mb,
            "confinement": self.confinement,
        }
