"""`doit download`: stage the official SciCode files and describe them in manifest.json."""
