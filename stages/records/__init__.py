"""Typed records of the run's artifacts and the one reader of artifact files in a process.

- `json_values`: the JSON value types (`JSONValue`, `JSONObject`), their deeply immutable form (`Frozen`,
  `FrozenObject`: tuples and read-only mappings) with `freeze`/`thaw`, and total field readers (`text`,
  `optional_text`, `integer`, `number`, `flag`, `obj`, `items`) that turn a frozen value into a typed field
  without raising on an unexpected shape.
- `store`: the memo of parsed artifacts, keyed by what the file is on disk (path, device, inode, size,
  mtime_ns): a file is parsed and validated at most once per process while it stays the same, the writer
  puts what it wrote into the memo, and `parse_counts` tells how often each file was parsed.

Each artifact's record (selection, generation, details, summary, manifest) is a frozen dataclass with
`from_record` (from the frozen JSON of a valid file) and `to_record` (the JSON object the writer writes);
they are the only code that knows an artifact's keys.
"""
