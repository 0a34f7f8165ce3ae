"""The trusted side, where verdicts are decided.

* In the checker process (run by path under `python_binary`, standard library and the numeric packages only):
  checker.py, which evaluates every assertion, and value_description.py, what a failed comparison is shown as
  (the doit process reads the same descriptions).
* In the doit process: rewrite.py (with cell_syntax.py and cell_flow.py), which splits each test cell between
  the test process and the checker, and verdict_rules.py, which decides every verdict: from what the engine saw
  of both processes, and for the steps that never ran or could not run, from what the parent side observed.

Every source here is part of the verdict-cache key.
"""
