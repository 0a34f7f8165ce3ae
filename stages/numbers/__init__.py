"""The numbers of a run, computed from its typed records the one way the summarize stage, `compare`, `runs` and
`export` all use:

* `rows`: one row per selected problem (its state and each step's cell) from the run's records;
* `metrics`: the headline and the tables aggregated from the rows (counts, rates, tool use, usage, cost);
* `passk`: pass@k over the attempts of a run;
* `pricing`: the cost of a run's token usage under the price settings;
* `provenance`: when a run started and which version of this project wrote its numbers;
* `uncertainty/`: the 95% intervals of one run's numbers and the paired tests between two runs;
* `text`: how a rate and a name are written in text (with its denominator; as a code span).

No page or template is written here (`stages.pages` writes the HTML pages).
"""
