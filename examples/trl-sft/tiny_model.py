"""The example's base model: a tiny random-init Llama with a tokenizer trained
on the dataset's own text, built on first use (nothing is downloaded) and
kept for the next runs. A real fine-tune names a Hugging Face model instead
(``--base_model meta-llama/Llama-3.2-1B`` or a folder on shared storage).

The ranks of a node share the folder: the first builds it under a file lock,
into a temporary folder renamed when complete, and the others wait for it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path

from trainplane.testing.tiny_models import build_tiny_llama

DEFAULT_FOLDER = Path(tempfile.gettempdir()) / "trainplane-examples" / "trl-sft-tiny-llama"


def ensure_tiny_model(folder: Path, dataset: Path) -> Path:
    """``folder`` holding the tiny model, built from ``dataset``'s text when missing."""
    if (folder / "config.json").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(folder.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if (folder / "config.json").exists():
            return folder  # another rank built it while this one waited
        rows = [json.loads(line) for line in dataset.read_text().splitlines() if line]
        texts = [row["prompt"] + row["completion"] for row in rows]
        partial = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
        try:
            build_tiny_llama(partial, texts=texts)
            os.replace(partial, folder)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    print(f"built the tiny base model in {folder}", flush=True)
    return folder
