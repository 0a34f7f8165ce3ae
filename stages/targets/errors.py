"""The errors of the targets stage."""

from __future__ import annotations

from stages.errors import PipelineError


class TargetsError(PipelineError, RuntimeError):
    """Derived targets could not be produced; the message says why."""


class DerivationError(ValueError):
    """One step's targets could not be derived (unsupported test, unwritable value, ...)."""
