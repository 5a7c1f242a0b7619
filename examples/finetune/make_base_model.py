"""Build the example's base model: a tiny random-init Llama with its own
tokenizer, saved with ``save_pretrained`` in ``tiny-llama/`` beside this file.

A real fine-tune points ``base_model`` at a Hugging Face model folder on
shared storage or S3 (``s3://models/llama-3.2-1b``); this one exists so the
example runs anywhere, with nothing downloaded.

    python examples/finetune/make_base_model.py
"""

from __future__ import annotations

from pathlib import Path

from trainplane.testing.tiny_models import build_tiny_llama

if __name__ == "__main__":
    folder = Path(__file__).resolve().parent / "tiny-llama"
    if (folder / "config.json").exists():
        print(f"{folder} exists")
    else:
        build_tiny_llama(folder)
        print(f"saved {folder}")
