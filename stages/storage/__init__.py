"""Files: every path, atomic schema-validated artifacts, the memo of parsed files and the JSON value types."""
