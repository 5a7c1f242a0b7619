"""Invalid specs and the field each error must name; shared by the validator's
unit tests and the API tests (which also check that nothing is written)."""

from __future__ import annotations

from typing import Any

from tests.factories import finetune_spec, train_spec


def _with(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    node = base
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    if value is _DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return base


_DELETE = object()

# (case id, spec, the field the error must name)
INVALID_SPECS: list[tuple[str, dict[str, Any], str]] = [
    ("missing kind", _with(train_spec(), "kind", _DELETE), "kind"),
    ("unknown kind", train_spec(kind="evaluate"), "kind"),
    ("unknown top-level field", train_spec(bogus_field=1), "bogus_field"),
    ("unknown nested field", _with(train_spec(), "resources.tpus", 2), "resources.tpus"),
    ("missing name", _with(train_spec(), "name", _DELETE), "name"),
    ("bad name", train_spec(name="has spaces"), "name"),
    ("bad project", train_spec(project="Vision!"), "project"),
    ("zero gpus", _with(train_spec(), "resources.gpus", 0), "resources.gpus"),
    ("gpus not an integer", _with(train_spec(), "resources.gpus", "many"), "resources.gpus"),
    (
        "gpus not divisible by gpus_per_node",
        _with(_with(train_spec(), "resources.gpus", 6), "resources.gpus_per_node", 4),
        "resources",
    ),
    ("no entrypoint form", _with(train_spec(), "entrypoint", {"args": {}}), "entrypoint"),
    ("two entrypoint forms", _with(train_spec(), "entrypoint.script", "train.py"), "entrypoint"),
    ("train without entrypoint", _with(train_spec(), "entrypoint", _DELETE), "entrypoint"),
    (
        "bad function reference",
        _with(train_spec(), "entrypoint.function", "train.py"),
        "entrypoint.function",
    ),
    ("empty command", _with(train_spec(), "entrypoint", {"command": []}), "entrypoint.command"),
    ("reserved env var", _with(train_spec(), "entrypoint.env", {"RANK": "3"}), "entrypoint.env"),
    (
        "trainplane's own env var",
        _with(train_spec(), "entrypoint.env", {"TRAINPLANE_ATTEMPT_TOKEN": "x"}),
        "entrypoint.env",
    ),
    (
        "secret key with spaces",
        _with(train_spec(), "entrypoint.secrets", {"HF_TOKEN": "hf token"}),
        "entrypoint.secrets",
    ),
    (
        "secret into a reserved env var",
        _with(train_spec(), "entrypoint.secrets", {"MASTER_ADDR": "addr"}),
        "entrypoint.secrets",
    ),
    (
        "secret into trainplane's own env var",
        _with(train_spec(), "entrypoint.secrets", {"TRAINPLANE_ATTEMPT_TOKEN": "t"}),
        "entrypoint.secrets",
    ),
    (
        "variable both in env and secrets",
        _with(
            _with(train_spec(), "entrypoint.env", {"HF_TOKEN": "plain"}),
            "entrypoint.secrets",
            {"HF_TOKEN": "hf-token"},
        ),
        "entrypoint.secrets",
    ),
    ("unknown strategy", _with(train_spec(), "strategy", {"type": "horovod"}), "strategy.type"),
    (
        "ZeRO stage 4",
        _with(train_spec(), "strategy", {"type": "deepspeed", "deepspeed": {"stage": 4}}),
        "strategy.deepspeed.stage",
    ),
    (
        "offload without ZeRO",
        _with(train_spec(), "strategy", {"type": "ddp", "deepspeed": {"offload_optimizer": "cpu"}}),
        "strategy",
    ),
    (
        "param offload below stage 3",
        _with(
            train_spec(),
            "strategy",
            {"type": "deepspeed", "deepspeed": {"stage": 2, "offload_param": "cpu"}},
        ),
        "strategy.deepspeed",
    ),
    (
        "unknown offload device",
        _with(
            train_spec(),
            "strategy",
            {"type": "deepspeed", "deepspeed": {"offload_optimizer": "gpu"}},
        ),
        "strategy.deepspeed.offload_optimizer",
    ),
    (
        "fsdp options with ddp",
        _with(train_spec(), "strategy", {"type": "ddp", "fsdp": {"cpu_offload": True}}),
        "strategy",
    ),
    ("bad precision", train_spec(precision="fp8"), "precision"),
    (
        "fp16 under fsdp, which has no loss scaling",
        train_spec(precision="fp16", strategy={"type": "fsdp"}),
        "precision",
    ),
    (
        "nvme optimizer offload",
        _with(
            train_spec(),
            "strategy",
            {"type": "deepspeed", "deepspeed": {"offload_optimizer": "nvme"}},
        ),
        "strategy.deepspeed.offload_optimizer",
    ),
    (
        "nvme parameter offload",
        _with(
            train_spec(),
            "strategy",
            {"type": "deepspeed", "deepspeed": {"stage": 3, "offload_param": "nvme"}},
        ),
        "strategy.deepspeed.offload_param",
    ),
    (
        "keep_best mode",
        _with(train_spec(), "checkpoint.keep_best", {"metric": "loss", "mode": "lowest"}),
        "checkpoint.keep_best.mode",
    ),
    ("keep_last zero", _with(train_spec(), "checkpoint.keep_last", 0), "checkpoint.keep_last"),
    (
        "relative storage",
        _with(train_spec(), "checkpoint.storage", "ckpt/here"),
        "checkpoint.storage",
    ),
    (
        "unsupported storage scheme",
        _with(train_spec(), "checkpoint.storage", "gs://b/ckpt"),
        "checkpoint.storage",
    ),
    ("malformed s3 uri", _with(train_spec(), "checkpoint.storage", "s3://"), "checkpoint.storage"),
    ("bad resume", _with(train_spec(), "checkpoint.resume", "latest"), "checkpoint.resume"),
    ("bad duration", train_spec(max_runtime="24 hours"), "max_runtime"),
    ("zero duration", train_spec(max_runtime="0h"), "max_runtime"),
    ("bad priority", train_spec(priority="urgent"), "priority"),
    ("negative restarts", _with(train_spec(), "retries.max_restarts", -1), "retries.max_restarts"),
    (
        "register_model without name",
        train_spec(register_model={"alias": "prod"}),
        "register_model.name",
    ),
    (
        "script with flags in it",
        train_spec(entrypoint={"script": "train.py --lr 0.1"}),
        "entrypoint.script",
    ),
    ("script that is a flag", train_spec(entrypoint={"script": "-m"}), "entrypoint.script"),
    (
        "script arg that cannot be a flag",
        train_spec(entrypoint={"script": "train.py", "args": {"learning rate": 0.1}}),
        "entrypoint.args.learning rate",
    ),
    (
        "register_model alias reserved by MLflow",
        train_spec(register_model={"name": "m", "alias": "latest"}),
        "register_model.alias",
    ),
    (
        "register_model alias that looks like a version",
        train_spec(register_model={"name": "m", "alias": "v3"}),
        "register_model.alias",
    ),
    ("finetune without dataset", _with(finetune_spec(), "dataset", _DELETE), "dataset"),
    ("finetune with entrypoint", finetune_spec(entrypoint={"command": ["python"]}), "entrypoint"),
    ("lora options on full fine-tune", finetune_spec(method={"type": "full", "r": 8}), "method"),
    ("unknown method", finetune_spec(method="qlora-4bit"), "method.type"),
    (
        "both max_steps and epochs",
        _with(finetune_spec(), "hyperparameters.epochs", 2),
        "hyperparameters",
    ),
    (
        "non-positive learning rate",
        _with(finetune_spec(), "hyperparameters.learning_rate", 0),
        "hyperparameters.learning_rate",
    ),
    ("unsupported model scheme", finetune_spec(base_model="hf://meta/llama"), "base_model"),
]
