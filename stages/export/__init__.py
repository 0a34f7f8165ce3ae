"""`doit export`: a run's results in formats other tools read, under `<run>/export/` (`export-<tag>/` for a
subset or several attempts, like the summary):

- `steps.csv` and `steps.jsonl` (`steps`): one flat table, a row per step and attempt, for pandas and
  spreadsheets;
- `inspect/<created>_scicode_<id>.json` (`inspect_log`): an inspect_ai evaluation log of the run in its JSON
  log format (written here, without importing inspect_ai), one sample per problem and attempt (epoch), that
  `inspect_ai.log.read_eval_log` reads and `inspect view` lists.

Both are read from the run's artifacts through `stages.records.results`; nothing is re-scored and no model is called.
"""
