"""scicode-pipeline: stages of the SciCode benchmark run (download, select, generate, score, summarize)."""
