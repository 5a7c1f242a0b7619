"""A LoRA fine-tune with TRL's ``SFTTrainer`` on prompt/completion pairs;
trainplane's lines are marked ``# trainplane``.

The base model is a tiny random-init Llama built on first use (tiny_model.py),
the data the pairs in data.jsonl: nothing is downloaded. Run it either way:

    torchrun --nproc-per-node 2 train.py
    trainplane submit examples/trl-sft/job.yaml --wait
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from datasets import load_dataset
from peft import LoraConfig
from tiny_model import DEFAULT_FOLDER, ensure_tiny_model
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import SFTConfig, SFTTrainer

from trainplane.integrations.transformers import (  # trainplane
    TrainplaneCallback,
    model_dir,
    resume_from,
    trainer_arguments,
)

HERE = Path(__file__).resolve().parent


class Pause(TrainerCallback):
    """Sleeps after each step, to watch the run (or stop it) as it trains."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):
        time.sleep(self.seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base_model", help="a Hugging Face model name or folder")
    parser.add_argument("--data", default=str(HERE / "data.jsonl"))
    parser.add_argument("--max_steps", type=int, default=40)
    parser.add_argument("--learning_rate", type=float, default=2e-3)
    parser.add_argument("--step_sleep", type=float, default=0.0)
    args = parser.parse_args()

    base = args.base_model or ensure_tiny_model(DEFAULT_FOLDER, Path(args.data))
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    dataset = load_dataset("json", data_files=args.data, split="train")
    config = SFTConfig(
        max_steps=args.max_steps,
        learning_rate=args.learning_rate,
        per_device_train_batch_size=8,
        max_length=32,
        logging_steps=5,
        report_to="none",
        disable_tqdm=True,
        **trainer_arguments(),  # trainplane: output_dir, checkpoints, strategy, precision
    )
    pauses = [Pause(args.step_sleep)] if args.step_sleep else []
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=LoraConfig(
            r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
        ),
        callbacks=[TrainplaneCallback(), *pauses],  # trainplane
    )
    trainer.train(resume_from_checkpoint=resume_from())  # trainplane
    trainer.save_model(model_dir())  # trainplane: the adapter and its tokenizer


if __name__ == "__main__":
    main()
