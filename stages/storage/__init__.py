"""Files: every path (and where the package's own schemas are), atomic schema-validated artifacts, the memo of parsed
files, the JSON value types and the one Markdown table writer."""
