"""Error bars and paired tests, as pure functions on typed records (no file is read here).

- `intervals`: the 95% intervals of one run's headline numbers: the main-problem resolve rate (Wilson, over
  problems), the subproblem pass rate (standard error clustered by problem) and pass@k (bootstrap over problems);
- `paired`: two runs on the problems both scored: the exact McNemar test on resolved problems and the paired
  difference of step pass rates (clustered by problem).

README ("Error bars and paired tests") gives the formulas and their references.
"""
