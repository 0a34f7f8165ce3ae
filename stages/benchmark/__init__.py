"""Facts of the SciCode benchmark: problems, the answer protocol, categories, pins and known-weak tests."""
