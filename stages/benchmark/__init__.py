"""Facts of the SciCode benchmark: the datasets (one description each), their problems, the answer protocol,
categories, pins, known-weak tests, the published protocols and figures, and the grading environments of a
protocol; the facts themselves are the JSON files beside the modules."""
