"""The status vocabularies of the pipeline's records, one definition each.

* `StepStatus`: a scored step's verdict (details files);
* `GenerationStepStatus`: a generated step (generation files); `context_exceeded` (the prompt did not fit the
  server's context) and `not_generated` (a later step of that problem, never asked) are final: a rerun does not
  ask again, and scoring counts both as failed;
* `ToolStatus`: one call of the code interpreter (trajectories in generation files).
"""

from __future__ import annotations

from typing import Literal

StepStatus = Literal["pass", "fail", "timeout", "parse_error", "eval_error", "skipped"]
GenerationStepStatus = Literal["ok", "truncated", "no_code", "error", "prefilled", "context_exceeded", "not_generated"]
ToolStatus = Literal["ok", "error", "timeout", "sandbox_error"]

STEP_STATUSES: tuple[StepStatus, ...] = ("pass", "fail", "timeout", "parse_error", "eval_error", "skipped")
NEVER_ANSWERED_STATUSES: tuple[GenerationStepStatus, ...] = ("context_exceeded", "not_generated")
# A step with one of these generation statuses (or without a generation record) has no answer of the model: its
# failing verdict is counted as `not_generated`, not as the model's wrong answer (`fail`).
UNGENERATED_STATUSES: tuple[GenerationStepStatus, ...] = ("error", *NEVER_ANSWERED_STATUSES)
TOOL_STATUSES: tuple[ToolStatus, ...] = ("ok", "error", "timeout", "sandbox_error")
