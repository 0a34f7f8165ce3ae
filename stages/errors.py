"""The base class of the pipeline's own errors: reported as one line, never as a traceback.

Every error the stages raise for a bad input or a failed stage derives from `PipelineError` (most also
keep a builtin base, e.g. `ValueError`, for code that catches them by it). The reporting code catches
`PipelineError` and shows `ErrorClass: message`; any other exception is a bug and keeps its traceback.
This module imports nothing from the stages, so every stage can import it.
"""

from __future__ import annotations


class PipelineError(Exception):
    """An error of the pipeline itself: its message is the one line the user sees."""


def pipeline_error_names() -> frozenset[str]:
    """Class names of every `PipelineError` subclass defined so far (those of the imported modules)."""
    names: set[str] = set()
    pending: list[type[PipelineError]] = [PipelineError]
    while pending:
        error_class = pending.pop()
        names.add(error_class.__name__)
        pending.extend(error_class.__subclasses__())
    return frozenset(names)


class RunStopped(PipelineError):
    """A failure that ends the whole run at once with one line and its own exit code (`stages.exit_codes`): an
    endpoint that cannot serve the run, a key refused mid-run. Work already finished stays saved."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code
