"""Integrations of trainplane with training libraries (Hugging Face Transformers and TRL, Lightning)."""
