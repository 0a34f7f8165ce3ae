"""Scoring engine: isolated, cheat-proof execution of SciCode test scripts with a verdict cache.

Public surface:

* `run_score(settings, problem_id, targets=None) -> dict` and `score_fingerprint(settings, problem_id)`
  (stage.py): the doit stage.
* `build_step_script(problem, step_index, codes, data_paths, carry) -> StepScript` (script.py): the
  official test script of one step, earlier steps carried as `carry` says.
* `execute_step(job) -> StepVerdict` (engine.py): one step: a confined test process and a checker.
* `rewrite_test(source, index, scope) -> RewrittenTest` (rewrite.py): the split of a test case between
  the test process (model side) and the checker (every assertion, and every statement it can evaluate
  itself); `checker_scope(deps)` is what the checker binds from `required_dependencies`.

The child side lives in harness.py (the untrusted test process), checker.py (the trusted checker),
wire.py (the data format between them), child_runtime.py (what they share), zygote.py (the warm
interpreter both are forked from) and runtime/ (our `scicode.parse.parse` / `scicode.compare.cmp`
and the compatibility shims); the kernel confinement is `stages/confinement/`.
"""
