"""The fine-tune recipe's pure parts: reading datasets and models (local and
on a real S3 API), tokenizing into blocks, the learning-rate schedule."""

from __future__ import annotations

import itertools
import json
import math
import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from trainplane.jobs.spec import Hyperparameters
from trainplane.recipes.finetune import blocks, inputs
from trainplane.recipes.finetune.base_model import local_folder
from trainplane.recipes.finetune.recipe import lr_factor, total_steps
from trainplane.storage.backends import s3_client
from trainplane.testing.tiny_models import write_jsonl

pytestmark = pytest.mark.ray_free


@pytest.fixture(scope="module")
def tokenizer(finetune_files):
    return AutoTokenizer.from_pretrained(finetune_files.model)


def test_a_dataset_is_summarised_and_blank_lines_are_skipped(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "a b"}, {"text": "c", "extra": 1}])
    path.write_text(path.read_text() + "\n\n")
    summary = inputs.check_dataset("dataset.train", str(path))
    assert (summary.rows, summary.format) == (2, "text")
    # Rows keep only the fields of their format.
    assert inputs.read_dataset("dataset.train", str(path)) == [{"text": "a b"}, {"text": "c"}]


def test_reading_stops_at_the_first_bad_line_naming_it(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "ok"}\n{"text": "ok"}\n{"text": \n')
    with pytest.raises(inputs.InputProblem, match=r"dataset.eval: line 3 is not valid JSON"):
        inputs.read_dataset("dataset.eval", str(path))


def test_an_empty_prompt_is_allowed_but_not_an_empty_completion(tmp_path):
    good = write_jsonl(tmp_path / "g.jsonl", [{"prompt": "", "completion": "x"}])
    assert inputs.check_dataset("d", str(good)).rows == 1
    bad = write_jsonl(tmp_path / "b.jsonl", [{"prompt": "p", "completion": "  "}])
    with pytest.raises(inputs.InputProblems, match="line 1: 'completion' is empty"):
        inputs.check_dataset("d", str(bad))


def test_a_folder_given_as_a_dataset_is_refused(tmp_path):
    with pytest.raises(inputs.InputProblem, match="is a folder, not a JSONL file"):
        inputs.check_dataset("dataset.train", str(tmp_path))


def test_datasets_and_models_on_s3_are_checked_and_the_model_is_cached(
    s3_bucket, finetune_files, tmp_path, monkeypatch
):
    client = s3_client()
    client.upload_file(str(finetune_files.train), s3_bucket, "data/train.jsonl")
    for file in finetune_files.model.iterdir():
        client.upload_file(str(file), s3_bucket, f"models/tiny/{file.name}")
    summary = inputs.check_dataset("dataset.train", f"s3://{s3_bucket}/data/train.jsonl")
    assert (summary.rows, summary.format) == (240, "prompt_completion")
    model = inputs.check_base_model("base_model", f"s3://{s3_bucket}/models/tiny")
    assert model.architecture == "LlamaForCausalLM"
    with pytest.raises(inputs.InputProblem, match="does not exist"):
        inputs.check_dataset("dataset.eval", f"s3://{s3_bucket}/data/missing.jsonl")
    with pytest.raises(inputs.InputProblem, match="no objects under it"):
        inputs.check_base_model("base_model", f"s3://{s3_bucket}/models/none")

    monkeypatch.setenv("TRAINPLANE_CACHE_DIR", str(tmp_path / "cache"))
    folder = local_folder(f"s3://{s3_bucket}/models/tiny")
    assert sorted(p.name for p in (tmp_path / "cache" / "models").iterdir()) == [
        folder.rsplit("/", 1)[1]
    ]
    copied = Path(folder) / "config.json"
    assert copied.read_bytes() == (finetune_files.model / "config.json").read_bytes()
    # A second call reuses the copy.
    client.delete_object(Bucket=s3_bucket, Key="models/tiny/config.json")
    assert local_folder(f"s3://{s3_bucket}/models/tiny") == folder


def test_a_model_without_a_tokenizer_is_refused(finetune_files, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(finetune_files.model, folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    with pytest.raises(inputs.InputProblem, match="has no tokenizer"):
        inputs.check_base_model("base_model", str(folder))
    (folder / "config.json").write_text(json.dumps({"architectures": ["X"]}))
    with pytest.raises(inputs.InputProblem, match="has no model_type"):
        inputs.check_base_model("base_model", str(folder))


def test_the_loss_is_on_the_completion_only(tokenizer):
    row = {"prompt": "what is 2 plus 2?", "completion": " 4"}
    encoded = blocks.encode(row, tokenizer)
    prompt = tokenizer("what is 2 plus 2?", add_special_tokens=False)["input_ids"]
    completion = tokenizer(" 4", add_special_tokens=False)["input_ids"]
    assert encoded.input_ids == [
        tokenizer.bos_token_id,
        *prompt,
        *completion,
        tokenizer.eos_token_id,
    ]
    assert encoded.labels == [blocks.IGNORE] * (len(prompt) + 1) + [
        *completion,
        tokenizer.eos_token_id,
    ]
    text = blocks.encode({"text": "what is 1 plus 1? 2"}, tokenizer)
    assert text.labels == text.input_ids


def test_padding_cuts_and_pads_each_row_and_drops_rows_without_a_label(tokenizer):
    rows = [
        {"prompt": "what is 1 plus 1?", "completion": " 2"},
        {"prompt": "what is 12 plus 12? " * 10, "completion": " 24"},  # prompt fills the block
    ]
    made, dropped = blocks.token_blocks(rows, tokenizer, max_seq_len=16, packing=False)
    assert (len(made), dropped) == (1, 1)
    first = blocks.encode(rows[0], tokenizer)
    length = len(first.input_ids)
    item = made[0]
    assert item["input_ids"][:length].tolist() == first.input_ids
    assert item["input_ids"][length:].tolist() == [tokenizer.pad_token_id] * (16 - length)
    assert item["attention_mask"].tolist() == [1] * length + [0] * (16 - length)
    assert item["labels"][length:].tolist() == [blocks.IGNORE] * (16 - length)
    assert made.trained_tokens == sum(1 for t in first.labels if t != blocks.IGNORE)


def test_packing_concatenates_rows_into_full_blocks(tokenizer):
    rows = [{"text": f"what is {i} plus {i}? {2 * i}"} for i in range(20)]
    stream = [t for row in rows for t in blocks.encode(row, tokenizer).input_ids]
    made, dropped = blocks.token_blocks(rows, tokenizer, max_seq_len=32, packing=True)
    assert dropped == 0
    assert len(made) == math.ceil(len(stream) / 32)
    assert made.input_ids.flatten()[: len(stream)].tolist() == stream
    assert int(made.attention_mask.sum()) == len(stream)  # only the last block is padded
    assert made.attention_mask[:-1].all()


def test_learning_rate_warms_up_then_decays_to_zero():
    cosine = [lr_factor(s, warmup=4, total=20, schedule="cosine") for s in range(21)]
    assert cosine[:4] == [0.2, 0.4, 0.6, 0.8]
    assert cosine[4] == 1.0 and cosine[20] == pytest.approx(0.0)
    assert all(a >= b for a, b in itertools.pairwise(cosine[4:]))
    linear = [lr_factor(s, warmup=0, total=10, schedule="linear") for s in (0, 5, 10)]
    assert linear == [1.0, 0.5, 0.0]
    assert lr_factor(7, warmup=2, total=10, schedule="constant") == 1.0


def test_epochs_become_optimizer_steps():
    assert total_steps(Hyperparameters(max_steps=7, grad_accum=4), 100) == 7
    assert total_steps(Hyperparameters(epochs=2.5, grad_accum=4), 30) == 18
    assert total_steps(Hyperparameters(epochs=1, grad_accum=8), 3) == 1


def test_the_example_fine_tune_is_a_valid_spec_with_valid_datasets():
    from trainplane.jobs.spec import parse_spec
    from trainplane.sdk.specfile import load_spec_file

    folder = Path(__file__).resolve().parents[2] / "examples" / "finetune"
    spec = parse_spec(load_spec_file(folder / "job.yaml", []))
    assert spec.base_model == str(folder / "tiny-llama")  # made by make_base_model.py
    train = inputs.check_dataset("dataset.train", spec.dataset.train)
    assert (train.rows, train.format) == (200, "prompt_completion")
    assert inputs.check_dataset("dataset.eval", spec.dataset.eval).rows == 40
