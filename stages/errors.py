"""The pipeline's own error classes: reported as one line, never as a traceback."""
from __future__ import annotations

from importlib import import_module

from stages.artifacts import ArtifactError
from stages.config import ConfigError
from stages.problems import ProblemDataError

# (module, class) of errors defined by the stages themselves.
_STAGE_ERRORS = (
    ("stages.download", "DownloadError"),
    ("stages.targets", "TargetsError"),
    ("stages.generate.stage", "RunAborted"),
    ("stages.score.stage", "ScoringError"),
    ("stages.compare", "CompareError"),
    ("stages.summarize", "SummarizeError"),
)


def _stage_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = []
    for module_name, class_name in _STAGE_ERRORS:
        try:
            error_class = getattr(import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        found.append(error_class)
    return tuple(found)


PIPELINE_ERRORS: tuple[type[BaseException], ...] = (ConfigError, ProblemDataError, ArtifactError, *_stage_errors())
