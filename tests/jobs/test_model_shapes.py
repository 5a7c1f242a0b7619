"""Parameter counts from config.json match the models transformers builds
from the same configs (tiny, random weights, built here)."""

from __future__ import annotations

import pytest

from trainplane.jobs.model_shapes import UnknownShape, shape_from_config

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 172,
    "num_hidden_layers": 3,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "vocab_size": 500,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}
GPT2 = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "n_embd": 48,
    "n_layer": 2,
    "n_head": 4,
    "n_positions": 128,
    "vocab_size": 300,
}


def _built(config: dict) -> object:
    cls = transformers.AutoConfig.for_model(**config)
    return transformers.AutoModelForCausalLM.from_config(cls)


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    "config",
    [LLAMA, LLAMA | {"tie_word_embeddings": True}, LLAMA | {"num_key_value_heads": 8}, GPT2],
    ids=["llama", "llama-tied", "llama-mha", "gpt2"],
)
def test_the_count_is_exact(config):
    shape = shape_from_config(config)
    assert shape.parameters == _count(_built(config))
    assert shape.layers == config.get("num_hidden_layers", config.get("n_layer"))


def test_lora_trainables_are_the_adapters_of_every_linear_projection():
    model = _built(LLAMA)
    adapted = peft.get_peft_model(
        model, peft.LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM")
    )
    trainable = sum(p.numel() for p in adapted.parameters() if p.requires_grad)
    shape = shape_from_config(LLAMA, lora_rank=4)
    assert shape.trainable == trainable
    only_q_v = shape_from_config(LLAMA, lora_rank=4, lora_targets=["q_proj", "v_proj"])
    assert only_q_v.trainable == 3 * 4 * ((64 + 64) + (64 + 16))


def test_a_config_without_the_sizes_says_what_it_needs():
    with pytest.raises(UnknownShape, match="hidden_size, num_hidden_layers and vocab_size"):
        shape_from_config({"model_type": "mystery"})
