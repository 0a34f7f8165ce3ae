"""The status vocabularies of the pipeline's records, one definition each.

* `StepStatus`: a scored step's verdict (details files);
* `GenerationStepStatus`: a generated step (generation files);
* `ToolStatus`: one call of the code interpreter (trajectories in generation files).
"""

from __future__ import annotations

from typing import Literal

StepStatus = Literal["pass", "fail", "timeout", "parse_error", "eval_error", "skipped"]
GenerationStepStatus = Literal["ok", "truncated", "no_code", "error", "prefilled"]
ToolStatus = Literal["ok", "error", "timeout", "sandbox_error"]

STEP_STATUSES: tuple[StepStatus, ...] = ("pass", "fail", "timeout", "parse_error", "eval_error", "skipped")
TOOL_STATUSES: tuple[ToolStatus, ...] = ("ok", "error", "timeout", "sandbox_error")
