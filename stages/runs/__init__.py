"""`doit runs`: the index of every run, runs.md and runs.html."""
