"""Shared test helpers: deterministic data generators (data.py) and error metrics / assertions (compare.py)."""
