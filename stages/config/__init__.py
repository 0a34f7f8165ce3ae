"""Run configuration: the declared settings, how raw values are read, and the fingerprints over them."""
