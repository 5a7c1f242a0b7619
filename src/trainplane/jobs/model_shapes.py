"""A model's size and shape from a Hugging Face ``config.json`` (pure code),
for the memory estimate of a fine-tune: nothing is downloaded or built.

Decoder-only causal LMs are counted layer by layer: the attention
projections (with grouped-query attention's smaller K and V), the MLP (three
matrices when it is gated, as in Llama, Mistral or Qwen; two otherwise), the
norms, the token embeddings, learned position embeddings where the model has
them, and the LM head unless it shares the embeddings' weights. Names differ
between families (GPT-2's ``n_embd``, ``n_layer``...); both are read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainplane.jobs.memory import ModelShape

GATED_ACTIVATIONS = ("silu", "swiglu", "geglu", "gelu_pytorch_tanh_gated")
CLASSIC_MODEL_TYPES = ("gpt2",)
GATED_MODEL_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "phi3")


def _first(config: dict[str, Any], *names: str) -> Any:
    for name in names:
        value = config.get(name)
        if value is not None:
            return value
    return None


class UnknownShape(ValueError):
    """The config lacks what the count needs; the message says what."""


def shape_from_config(
    config: dict[str, Any],
    *,
    lora_rank: int | None = None,
    lora_targets: Sequence[str] | None = None,
) -> ModelShape:
    hidden = _first(config, "hidden_size", "n_embd", "d_model")
    layers = _first(config, "num_hidden_layers", "n_layer", "num_layers")
    vocab = _first(config, "vocab_size")
    if not (isinstance(hidden, int) and isinstance(layers, int) and isinstance(vocab, int)):
        raise UnknownShape("config.json needs hidden_size, num_hidden_layers and vocab_size")
    heads = int(_first(config, "num_attention_heads", "n_head") or max(1, hidden // 64))
    kv_heads = int(_first(config, "num_key_value_heads") or heads)
    head_dim = int(_first(config, "head_dim") or hidden // heads)
    intermediate = int(_first(config, "intermediate_size", "n_inner", "ffn_dim") or 4 * hidden)
    activation = str(_first(config, "hidden_act", "activation_function") or "")
    gated = config.get("model_type") in GATED_MODEL_TYPES or activation in GATED_ACTIVATIONS
    # GPT-2-style models have biases everywhere and LayerNorms (weight and
    # bias); Llama-style ones RMSNorms (a weight) and no biases.
    classic = config.get("model_type") in CLASSIC_MODEL_TYPES
    norm = 2 * hidden if classic else hidden

    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    attention = hidden * q_out + 2 * hidden * kv_out + q_out * hidden
    mlp = (3 if gated else 2) * hidden * intermediate
    per_layer = attention + mlp + 2 * norm
    if classic or config.get("attention_bias"):
        per_layer += q_out + 2 * kv_out + hidden
    if classic or config.get("mlp_bias"):
        per_layer += (2 if gated else 1) * intermediate + hidden
    embeddings = vocab * hidden
    positions = _first(config, "n_positions", "max_position_embeddings")
    total = layers * per_layer + embeddings + norm  # and the final norm
    if classic and positions:  # learned position embeddings
        total += int(positions) * hidden
    if not config.get("tie_word_embeddings", True):
        total += vocab * hidden

    trainable = None
    if lora_rank:
        shapes = {
            "q_proj": (hidden, q_out),
            "k_proj": (hidden, kv_out),
            "v_proj": (hidden, kv_out),
            "o_proj": (q_out, hidden),
            "gate_proj": (hidden, intermediate),
            "up_proj": (hidden, intermediate),
            "down_proj": (intermediate, hidden),
            "c_attn": (hidden, q_out + 2 * kv_out),
            "c_proj": (hidden, hidden),
            "c_fc": (hidden, intermediate),
        }
        # PEFT's "all-linear" (the recipe's default): every projection above
        # that the family has.
        family = ("c_attn", "c_proj", "c_fc") if config.get("model_type") == "gpt2" else None
        targets = list(lora_targets or family or [k for k in shapes if not k.startswith("c_")])
        trainable = layers * sum(
            lora_rank * sum(shapes.get(name, (hidden, hidden))) for name in targets
        )
    return ModelShape(
        parameters=float(total),
        trainable=None if trainable is None else float(trainable),
        layers=layers,
        hidden_size=hidden,
        heads=heads,
        vocab_size=vocab,
    )
