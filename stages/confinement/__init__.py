"""Kernel confinement of processes that run model-written code (see confine.py)."""
