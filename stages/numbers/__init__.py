"""The numbers of a run, as pure functions on typed records: what the summarize stage, `compare`, `runs` and `export`
all compute and write the same way.

* `rows`: one row per selected problem (its state and each step's cell) from the run's records;
* `metrics`: the headline and the tables aggregated from the rows (counts, rates, tool use, usage, cost);
* `passk`: pass@k over the attempts of a run;
* `pricing`: the cost of a run's token usage under the price settings;
* `provenance`: where a run's verdicts come from (its targets, when it started, which version of this project);
* `uncertainty/`: the 95% intervals of one run's numbers and the paired tests between two runs;
* `text`: how a rate and a name are written in text (with its denominator; as a code span).

No page or template is written here (`stages.pages` writes the HTML pages).
"""
