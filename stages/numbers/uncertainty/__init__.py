"""Error bars and paired tests, as pure functions on typed records (no file is read here).

- `intervals`: the 95% intervals of one run's headline numbers: the main-problem resolve rate (Wilson, over
  problems), the subproblem pass rate and pass@k (clustered Wilson: a Wilson interval on the effective sample
  size that clustering by problem leaves), each valid at 0% and 100%;
- `paired`: two runs on the problems both scored: the exact McNemar test on resolved problems and the paired
  difference of step pass rates (Newcombe's hybrid score interval, the test on the SE clustered by problem);
- `text`: how intervals, their methods and p-values are written.

README ("Error bars and paired tests") gives the formulas and their references.
"""
