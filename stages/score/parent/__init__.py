"""The doit process's side of scoring: plans steps, starts their processes, caches verdicts, writes details.

Nothing here decides a verdict (those rules are `stages.score.checker`'s): an edit here rewrites the details
(their scoring-code hash) but keeps the cached verdicts.
"""
