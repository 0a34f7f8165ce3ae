"""Comparison and target-reading helpers that SciCode test cases import (`scicode.compare.cmp`,
`scicode.parse.parse`), reimplemented with the official semantics.

This folder is put on `sys.path` of the test process only; it is never installed.
"""
