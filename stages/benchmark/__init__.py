"""Facts of the SciCode benchmark: the datasets (one description each), their problems, the answer protocol,
categories, pins and known-weak tests."""
