"""`doit compare runs=A,B`: two runs side by side: paired tests, deltas, compare.md/.html/.json."""
