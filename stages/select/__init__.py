"""`select`: the ordered problems of a run and the run's config.json."""
