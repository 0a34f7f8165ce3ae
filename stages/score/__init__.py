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
"""
