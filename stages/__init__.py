"""scicode-pipeline: the stages of a SciCode benchmark run (download, select, targets, preflight, generate, score,
summarize), the tasks run on request over run folders (runs, compare, export), doit's side (pipeline) and the
layers they share (progress, records, config, benchmark, storage, execution); docs/architecture.md has the layers
and the rules the tests keep."""
