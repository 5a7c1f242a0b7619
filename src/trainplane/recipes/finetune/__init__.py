"""The ``kind: finetune`` recipe: a Hugging Face causal LM tuned on JSONL.

- ``inputs``: reading and checking the base model and the datasets (also used
  by the control plane, before a job is queued);
- ``blocks``: turning rows into fixed-length token blocks (padding or packing);
- ``base_model``: loading the base model and tokenizer (a local copy of one on S3),
  and LoRA;
- ``recipe``: the train function;
- ``model_export``: the trained model (or LoRA adapter) as an MLflow transformers model.
"""
