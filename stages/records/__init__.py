"""Typed records of the run's artifacts, read through `results` (the run's files as records) and written by their
stages. The JSON value types and the memo of parsed files they rest on are `stages.storage.json_values` and
`stages.storage.store`.

Each artifact's record (selection, generation, details, summary, manifest) is a frozen dataclass with
`from_record` (from the frozen JSON of a valid file) and `to_record` (the JSON object the writer writes);
they are the only code that knows an artifact's keys.
"""
