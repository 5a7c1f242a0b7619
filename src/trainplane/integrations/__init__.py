"""Integrations of trainplane with training libraries: Hugging Face
Transformers and TRL (``transformers``), Lightning (``lightning``). Each
imports its library; this package imports none."""
