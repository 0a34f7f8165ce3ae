"""`summarize`: summary.md, summary.json, the plots and report.html of a run, with the numbers they show."""
