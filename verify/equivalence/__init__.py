"""Equivalence testing support: pristine and patched vLLM import roots side by side."""
