"""Scoring: isolated, cheat-proof execution of SciCode test scripts with a verdict cache, laid out by trust.

* `parent/`: the doit process. The stage (`run_score`, `score_fingerprint`: stage.py), the step plan and
  requests (request.py), the official test script of a step (script.py), the engine that starts a step's two
  processes and forwards their frames (engine.py), the executors (executor.py, dask_executor.py), the
  launcher (launcher.py), the targets reader (targets_io.py, load_targets.py) and the verdict cache (cache.py).
  It holds no rule of what a verdict is: editing it rewrites the details but keeps the cached verdicts.
* `test_process/`: untrusted. The program of the confined process that runs the model's code and each test
  cell's model side (runner.py); nothing it says is taken on trust.
* `checker/`: trusted, where verdicts are decided. The checker program (checker.py, value_description.py),
  the split of each test cell between the two processes (rewrite.py with cell_syntax.py and cell_flow.py) and
  the rules that turn what the engine saw into a verdict (verdict_rules.py).
* `shared/`: what both processes use: the wire format (wire.py), framing and interpreter set-up
  (child_runtime.py), the warm interpreter both are forked from (zygote.py) and `runtime/` (our
  `scicode.parse.parse` / `scicode.compare.cmp` and the compatibility shims).

What runs under `python_binary` (test_process/, shared/, and checker.py, value_description.py) is run by path
with the standard library and the numeric packages only, and never imports the `stages` package. The verdict-cache key
covers the sources of test_process/, checker/, shared/ and `stages/execution/confinement/` (`parent/cache.py`).

The rest of `stages` imports only this package's public face (`__all__` below: the step script, the rewritten
tests, a step's targets, value descriptions and the few entry points the wiring uses) and the score task kind
(`task.py`), never a module inside it (tests/test_import_graph.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stages.score.checker.rewrite import RewriteError, rewrite_tests
    from stages.score.checker.value_description import REPR_CHARS, describe, differences
    from stages.score.parent.dask_executor import missing_dependency
    from stages.score.parent.launcher import start_zygote_in_background
    from stages.score.parent.script import build_step_script
    from stages.score.parent.stage import expected_work, score_fingerprint
    from stages.score.parent.targets_io import read_step_targets

# The public face: each name the rest of `stages` may use and the module that defines it, imported on first use, so
# importing `stages.score` (every doit command does, for the score task kind) costs no more than an empty package.
EXPORTED_FROM: dict[str, str] = {
    "build_step_script": "stages.score.parent.script",  # a step's test script, as scoring runs it
    "rewrite_tests": "stages.score.checker.rewrite",  # the test cells split between test process and checker
    "RewriteError": "stages.score.checker.rewrite",
    "read_step_targets": "stages.score.parent.targets_io",  # a step's target values, read from the targets file
    "describe": "stages.score.checker.value_description",  # how a compared value is described
    "differences": "stages.score.checker.value_description",
    "REPR_CHARS": "stages.score.checker.value_description",
    "expected_work": "stages.score.parent.stage",  # for the wiring: the scoring a problem will need
    "score_fingerprint": "stages.score.parent.stage",  # for the wiring: what a problem's details are current for
    "missing_dependency": "stages.score.parent.dask_executor",  # for the wiring: why executor=dask cannot run here
    "start_zygote_in_background": "stages.score.parent.launcher",  # for the wiring: warm the test processes early
}

__all__ = [
    "REPR_CHARS",
    "RewriteError",
    "build_step_script",
    "describe",
    "differences",
    "expected_work",
    "missing_dependency",
    "read_step_targets",
    "rewrite_tests",
    "score_fingerprint",
    "start_zygote_in_background",
]


def __getattr__(name: str) -> object:
    """A public name, imported from its module on first use (then kept here)."""
    module = EXPORTED_FROM.get(name)
    if module is None:
        raise AttributeError(f"stages.score has no public name {name!r}; its public names: {', '.join(__all__)}")
    value: object = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
