"""Target-reading helpers (`scicode.parse.parse`)."""
