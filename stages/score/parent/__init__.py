"""The doit process's side of scoring: plans steps, starts their processes, caches verdicts, writes details.

Nothing here decides a verdict: every verdict, executed or not, is made by the rules of
`stages.score.checker.verdict_rules`, called with what this side observed (the generation record, a missing
targets file, a process that could not start, a lost worker). An edit here rewrites the details (their
scoring-code hash) but keeps the cached verdicts.
"""
