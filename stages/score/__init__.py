"""Scoring engine: isolated, cheat-proof execution of SciCode test scripts with a verdict cache.

Public surface:

* `run_score(settings, problem_id, targets=None) -> dict` and `score_fingerprint(settings, problem_id)`
  (stage.py): the doit stage.
* `build_step_script(problem, step_index, codes, data_paths, carry) -> StepScript` (script.py): the
  official test script of one step, earlier steps carried as `carry` says.
* `execute_step(job) -> StepVerdict` (engine.py): one step in one isolated test process.
* `rewrite_test(source, index) -> RewrittenTest` (rewrite.py): the split of a test case.

The test-process side lives in harness.py (the program), zygote.py (the warm interpreter) and
runtime/ (our `scicode.parse.parse` / `scicode.compare.cmp` and the compatibility shims).
"""
