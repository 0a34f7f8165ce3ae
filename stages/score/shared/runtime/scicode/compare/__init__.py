"""Comparison helpers (`scicode.compare.cmp`)."""
