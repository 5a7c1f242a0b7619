"""A Hugging Face ``save_pretrained`` folder with no tokenizer, as an MLflow
``python_function`` model "from code": MLflow copies this file into the model
and runs it to load the model (``set_model`` below), so nothing is pickled.
trainplane never imports it; it imports only what the registered model's
environment holds (mlflow, torch, transformers).

The model is the architecture ``config.json`` names, loaded from safetensors
(no remote code). ``predict`` takes token ids, one sequence per row (a list
of lists of ints: the model's signature, which MLflow checks; or a
DataFrame with one list per cell), and answers per row: a causal LM the next
token id (greedy), a classification head its class (per token for a token
head), a bare encoder the last position's hidden state.
"""

from __future__ import annotations

from typing import Any

import mlflow
import torch
import transformers

ARTIFACT = "pretrained"  # the save_pretrained folder, as the model's artifact (script_model)
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


class PretrainedModel(mlflow.pyfunc.PythonModel):
    def load_context(self, context: Any) -> None:
        folder = context.artifacts[ARTIFACT]
        config = transformers.AutoConfig.from_pretrained(folder)
        architecture = (config.architectures or [""])[0]
        model_class = getattr(transformers, architecture, None)
        if not (
            isinstance(model_class, type) and issubclass(model_class, transformers.PreTrainedModel)
        ):
            raise ValueError(f"transformers has no model class {architecture!r}")
        self.model = model_class.from_pretrained(folder, use_safetensors=True).eval()
        self.causal = architecture.endswith(CAUSAL_SUFFIXES)

    # The hint is the model's input schema, which MLflow checks and serving
    # documents; the answer's type depends on the head, so it has none.
    def predict(self, context: Any, model_input: list[list[int]], params: Any = None):
        answers = []
        with torch.no_grad():
            for row in _rows(model_input):
                output = self.model(input_ids=torch.tensor([row], dtype=torch.long))
                logits = getattr(output, "logits", None)
                if logits is None:
                    answers.append(output.last_hidden_state[0, -1].tolist())
                elif self.causal:
                    answers.append(int(logits[0, -1].argmax()))
                else:
                    answers.append(logits[0].argmax(-1).tolist())
        return answers


def _rows(model_input: Any) -> list[list[int]]:
    """One list of token ids per sequence, whatever container it came in."""
    if hasattr(model_input, "columns"):  # a DataFrame
        if len(model_input.columns) == 1:
            cells = model_input.iloc[:, 0].tolist()
            if cells and not isinstance(cells[0], (int, float)):
                return [[int(i) for i in cell] for cell in cells]
        model_input = model_input.to_numpy()
    if hasattr(model_input, "tolist"):
        model_input = model_input.tolist()
    rows = list(model_input)
    if rows and isinstance(rows[0], (int, float)):
        rows = [rows]  # a single sequence
    return [[int(i) for i in row] for row in rows]


mlflow.models.set_model(PretrainedModel())
