"""Targets: which HDF5 file of expected values the scorer reads, and deriving one from reference code.

The official `test_data.h5` holds, for every scored step, the value each test case compares with
`target`. When it is absent, the steps of problems that ship reference code (the validation split) can
get targets derived, in the official layout. One module per job:

* `comparison`: by AST, the expression a test case compares with `target`, and the capture program;
* `layout`: the official HDF5 layout of a compared value, and the atomic write of a targets file;
* `derive`: the `targets` stage, each step evaluated in a fresh isolated process, and its record;
* `resolve`: `resolve_targets(settings)`, the targets file the scorer reads.

The names other modules use are importable from `stages.targets` itself, each imported from its module on first
use: importing the package (as the `targets` task kind does for every doit command) costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stages.targets.comparison import (
        CAPTURE_NAME,
        ComparisonKind,
        TargetComparison,
        capture_program,
        compared_expression,
        find_target_comparison,
        survey_comparisons,
    )
    from stages.targets.derive import (
        DerivationJob,
        DerivationOutcome,
        derive_targets,
        derived_record_path,
        derived_targets_current,
        derived_targets_fingerprint,
        derived_targets_fingerprint_parts,
        evaluate_step,
        expected_durations,
        longest_first,
        run_step_isolated,
        step_jobs,
    )
    from stages.targets.errors import DerivationError, TargetsError
    from stages.targets.layout import (
        GZIP_MIN_BYTES,
        H5Dataset,
        H5Group,
        H5Node,
        layout_of_test,
        value_layout,
        write_targets_file,
    )
    from stages.targets.resolve import ResolvedTargets, TargetsKind, resolve_targets

__all__ = [
    "CAPTURE_NAME",
    "GZIP_MIN_BYTES",
    "ComparisonKind",
    "DerivationError",
    "DerivationJob",
    "DerivationOutcome",
    "H5Dataset",
    "H5Group",
    "H5Node",
    "ResolvedTargets",
    "TargetComparison",
    "TargetsError",
    "TargetsKind",
    "capture_program",
    "compared_expression",
    "derive_targets",
    "derived_record_path",
    "derived_targets_current",
    "derived_targets_fingerprint",
    "derived_targets_fingerprint_parts",
    "evaluate_step",
    "expected_durations",
    "find_target_comparison",
    "layout_of_test",
    "longest_first",
    "resolve_targets",
    "run_step_isolated",
    "step_jobs",
    "survey_comparisons",
    "value_layout",
    "write_targets_file",
]

_MODULES = ("resolve", "errors", "layout", "comparison", "derive")  # where the names of __all__ are, cheapest first


def __getattr__(name: str) -> object:
    """A name of `__all__`, imported from its module on first use."""
    if name in __all__:
        for module_name in _MODULES:
            module = importlib.import_module(f"{__name__}.{module_name}")
            if hasattr(module, name):
                value: object = getattr(module, name)
                globals()[name] = value
                return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
