"""The summary of a run, by job: `rows` (each selected problem's verdicts laid out by its selection entry),
`metrics` (aggregation: rates, groups, statuses, usage, attempts), `provenance` (which targets, when the run
started), `markdown` (summary.md) and `record` (summary.json). The summarize stage (`stages.summarize`)
reads the run, calls them and writes the files.
"""
