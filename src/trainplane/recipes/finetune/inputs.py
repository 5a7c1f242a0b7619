"""A fine-tune's inputs: the base model folder and the JSONL datasets.

The checks here run on the control plane when a job is submitted or planned,
so a missing file, a malformed line or a model that is not a causal LM is
reported before anything is queued. They read only files (no torch, no
transformers): ``config.json`` for the model, the lines of a dataset.

Every read is bounded, since the control plane reads on a tenant's behalf: a
line is at most MAX_LINE_BYTES (a longer one is a problem naming its line,
never held in memory whole), a check reads at most MAX_CHECKED_LINES lines and
MAX_CHECKED_BYTES of a dataset (the rest is the runtime's to read), and
config.json at most MAX_CONFIG_BYTES. Memory stays near two read chunks plus
one line, whatever the file holds.

A dataset is JSON Lines, one object per line, all rows of one format:
``{"text": ...}``, or ``{"prompt": ..., "completion": ...}`` (the loss is then
on the completion only). Blank lines are ignored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlparse

DatasetFormat = Literal["text", "prompt_completion"]
FORMAT_FIELDS: dict[DatasetFormat, tuple[str, ...]] = {
    "text": ("text",),
    "prompt_completion": ("prompt", "completion"),
}
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
# Architectures whose name says they predict the next token.
CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
MAX_PROBLEMS_PER_FILE = 5
# Bounds on what a read holds and how much a check reads (see the docstring).
MAX_LINE_BYTES = 8 * 1024 * 1024
MAX_CHECKED_LINES = 100_000
MAX_CHECKED_BYTES = 64 * 1024 * 1024
MAX_CONFIG_BYTES = 4 * 1024 * 1024
READ_CHUNK_BYTES = 1024 * 1024


class InputProblem(Exception):
    """One input that is wrong; ``field`` is the spec field to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class InputProblems(Exception):
    def __init__(self, problems: list[InputProblem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class DatasetSummary:
    rows: int
    format: DatasetFormat
    # False: the check stopped at its line or byte bound; `rows` counts the
    # rows it read, and the dataset may have more.
    complete: bool = True

    def describe(self) -> str:
        shape = "text" if self.format == "text" else "prompt/completion"
        if not self.complete:
            part = f"the first {MAX_CHECKED_LINES} lines or {MAX_CHECKED_BYTES // 2**20} MiB"
            return f"{self.rows} rows in the part checked ({part}), {shape}"
        return f"{self.rows} rows, {shape}"


@dataclass
class ReadProgress:
    """How far a bounded read of a dataset went."""

    bytes_read: int = 0
    complete: bool = True  # False: stopped at a bound before the end


@dataclass(frozen=True)
class ModelSummary:
    model_type: str
    architecture: str
    weights: str
    config: dict[str, Any]

    def describe(self) -> str:
        return f"{self.architecture} ({self.model_type}), weights in {self.weights}"


# --- reading ------------------------------------------------------------------


def _s3_parts(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    return parsed.netloc, parsed.path.lstrip("/")


def _require_absolute(field: str, location: str) -> None:
    if not location.startswith("s3://") and not os.path.isabs(location):
        raise InputProblem(
            field,
            f"'{location}' must be an absolute path or an s3:// URI (the CLI resolves "
            "paths relative to the spec file; an HTTP client must send them absolute)",
        )


def bounded_lines(
    read: Callable[[int], bytes], progress: ReadProgress, *, max_bytes: int | None = None
) -> Iterator[bytes | None]:
    """The lines ``read`` returns, without their newline; None in place of a
    line over MAX_LINE_BYTES, whose bytes are skipped, never held. Stops
    (``progress.complete`` False) once ``max_bytes`` are read, dropping the
    line it was in the middle of."""
    pending = bytearray()
    too_long = False  # inside a line already reported as too long
    while True:
        if max_bytes is not None and progress.bytes_read >= max_bytes:
            progress.complete = False
            return
        chunk = read(READ_CHUNK_BYTES)
        if not chunk:
            break
        progress.bytes_read += len(chunk)
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if not too_long:
                if len(pending) + end - start > MAX_LINE_BYTES:
                    yield None
                else:
                    yield bytes(pending) + chunk[start:end]
            pending.clear()
            too_long = False
            start = end + 1
        if too_long:
            continue
        if len(pending) + len(chunk) - start > MAX_LINE_BYTES:
            yield None
            pending.clear()
            too_long = True
        else:
            pending += chunk[start:]
    if pending and not too_long:
        yield bytes(pending)


def _lines(
    field: str, location: str, progress: ReadProgress, *, max_bytes: int | None = None
) -> Iterator[bytes | None]:
    """The file's lines (see bounded_lines), streamed; InputProblem when it
    is not there or cannot be read."""
    _require_absolute(field, location)
    if location.startswith("s3://"):
        from botocore.exceptions import BotoCoreError, ClientError

        from trainplane.storage.backends import s3_client

        bucket, key = _s3_parts(location)
        try:
            body = s3_client().get_object(Bucket=bucket, Key=key)["Body"]
            try:
                yield from bounded_lines(body.read, progress, max_bytes=max_bytes)
            finally:
                body.close()
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404", "NoSuchBucket"):
                raise InputProblem(field, f"{location} does not exist") from None
            raise InputProblem(field, f"cannot read {location}: {exc}") from None
        except BotoCoreError as exc:
            raise InputProblem(field, f"cannot read {location}: {exc}") from None
        return
    if not os.path.exists(location):
        raise InputProblem(field, f"{location} does not exist")
    if os.path.isdir(location):
        raise InputProblem(field, f"{location} is a folder, not a JSONL file")
    try:
        with open(location, "rb") as handle:
            yield from bounded_lines(handle.read, progress, max_bytes=max_bytes)
    except OSError as exc:
        raise InputProblem(field, f"cannot read {location}: {exc.strerror}") from None


def _row(field: str, number: int, line: bytes) -> dict[str, str]:
    try:
        row = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputProblem(field, f"line {number} is not valid JSON ({exc})") from None
    if not isinstance(row, dict):
        raise InputProblem(field, f"line {number} is a JSON {type(row).__name__}, not an object")
    return row


def _format_of(field: str, number: int, row: dict[str, Any]) -> DatasetFormat:
    if "text" in row:
        return "text"
    if "prompt" in row or "completion" in row:
        return "prompt_completion"
    raise InputProblem(
        field,
        f"line {number} has neither 'text' nor 'prompt' and 'completion' "
        f"(fields: {', '.join(sorted(row)) or 'none'})",
    )


def _check_row(field: str, number: int, row: dict[str, Any], format: DatasetFormat) -> None:
    for name in FORMAT_FIELDS[format]:
        if name not in row:
            raise InputProblem(field, f"line {number} has no '{name}' field")
        value = row[name]
        if not isinstance(value, str):
            raise InputProblem(
                field, f"line {number}: '{name}' is a {type(value).__name__}, not a string"
            )
        if not value.strip() and name != "prompt":
            raise InputProblem(field, f"line {number}: '{name}' is empty")


def _rows(
    field: str, location: str, progress: ReadProgress, *, max_bytes: int | None = None
) -> Iterator[tuple[int, dict[str, str] | InputProblem]]:
    """Each non-blank line's row, or the problem with it. The first good row
    fixes the dataset's format; every later row must have the same."""
    format: DatasetFormat | None = None
    fields: tuple[str, ...] = ()
    other = ""  # the key that would make a row of the other format
    lines = _lines(field, location, progress, max_bytes=max_bytes)
    for number, line in enumerate(lines, start=1):
        if line is None:
            yield (
                number,
                InputProblem(
                    field,
                    f"line {number} is longer than {MAX_LINE_BYTES // 2**20} MiB; "
                    "a row that long cannot be trained on: shorten or split it",
                ),
            )
            continue
        # The common case, cheaply: a good row of the known format.
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if (
            format is not None
            and type(row) is dict
            and other not in row
            and all(type(row.get(name)) is str for name in fields)
            and row[fields[-1]].strip()
        ):
            yield number, {name: row[name] for name in fields}
            continue
        if not line.strip():
            continue
        # Anything else: find what is wrong, or the format of the first row.
        try:
            row = _row(field, number, line)
            row_format = _format_of(field, number, row)
            if format is not None and row_format != format:
                wanted = " and ".join(f"'{n}'" for n in fields)
                raise InputProblem(
                    field, f"line {number} is {row_format} but earlier lines have {wanted}"
                )
            _check_row(field, number, row, row_format)
        except InputProblem as problem:
            yield number, problem
            continue
        format = row_format
        fields = FORMAT_FIELDS[format]
        other = "prompt" if format == "text" else "text"
        yield number, {name: row[name] for name in fields}


def read_dataset(field: str, location: str) -> list[dict[str, str]]:
    """The rows of a JSONL dataset; InputProblem at the first bad line."""
    rows = []
    for _, row in _rows(field, location, ReadProgress()):
        if isinstance(row, InputProblem):
            raise row
        rows.append(row)
    if not rows:
        raise InputProblem(field, f"{location} has no rows")
    return rows


def check_dataset(field: str, location: str) -> DatasetSummary:
    """Read the dataset once, up to MAX_CHECKED_LINES lines and
    MAX_CHECKED_BYTES; its summary, or InputProblems naming up to
    MAX_PROBLEMS_PER_FILE bad lines."""
    problems: list[InputProblem] = []
    rows = 0
    format: DatasetFormat | None = None
    progress = ReadProgress()
    for number, row in _rows(field, location, progress, max_bytes=MAX_CHECKED_BYTES):
        if isinstance(row, InputProblem):
            problems.append(row)
            if len(problems) >= MAX_PROBLEMS_PER_FILE:
                break
        else:
            rows += 1
            format = "text" if "text" in row else "prompt_completion"
        if number >= MAX_CHECKED_LINES:
            progress.complete = False
            break
    if problems:
        raise InputProblems(problems)
    if rows == 0 or format is None:
        if not progress.complete:
            raise InputProblem(
                field, f"{location} has no rows in its first {MAX_CHECKED_BYTES // 2**20} MiB"
            )
        raise InputProblem(field, f"{location} has no rows")
    return DatasetSummary(rows=rows, format=format, complete=progress.complete)


# --- the base model ----------------------------------------------------------------


def _model_files(field: str, location: str) -> tuple[set[str], bytes | None]:
    """The file names at the top of the model folder, and its config.json."""
    _require_absolute(field, location)
    if location.startswith("s3://"):
        from trainplane.storage.backends import StorageError, open_storage

        storage = open_storage(location)
        try:
            sizes = {name: size for name, size in storage.sizes("").items() if "/" not in name}
            config = None
            if "config.json" in sizes:
                _check_config_size(field, location, sizes["config.json"])
                config = storage.read_bytes("config.json")
        except StorageError as exc:
            raise InputProblem(field, f"cannot read {location}: {exc}") from None
        if not sizes:
            raise InputProblem(field, f"{location} does not exist (no objects under it)")
        return set(sizes), config
    if not os.path.exists(location):
        raise InputProblem(field, f"{location} does not exist")
    if not os.path.isdir(location):
        raise InputProblem(field, f"{location} is a file; give the model's folder")
    names = set(os.listdir(location))
    config = None
    if "config.json" in names:
        path = os.path.join(location, "config.json")
        _check_config_size(field, location, os.stat(path).st_size)
        with open(path, "rb") as handle:
            config = handle.read(MAX_CONFIG_BYTES + 1)
        _check_config_size(field, location, len(config))  # grew meanwhile
    return names, config


def _check_config_size(field: str, location: str, size: int) -> None:
    if size > MAX_CONFIG_BYTES:
        raise InputProblem(
            field,
            f"{location}/config.json is over {MAX_CONFIG_BYTES // 2**20} MiB; "
            "a model's config is a few KiB",
        )


def check_base_model(field: str, location: str) -> ModelSummary:
    """A Hugging Face causal LM folder: config.json naming a causal-LM
    architecture, weights, and a tokenizer."""
    names, raw = _model_files(field, location)
    if raw is None:
        raise InputProblem(field, f"{location} is not a Hugging Face model folder (no config.json)")
    try:
        config = json.loads(raw)
    except ValueError as exc:
        raise InputProblem(field, f"{location}/config.json is not valid JSON ({exc})") from None
    if not isinstance(config, dict) or not config.get("model_type"):
        raise InputProblem(field, f"{location}/config.json has no model_type")
    architectures = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    causal = [a for a in architectures if a.endswith(CAUSAL_LM_SUFFIXES)]
    if not causal:
        shown = ", ".join(architectures) or "none"
        raise InputProblem(
            field,
            f"{location} is not a causal language model (architectures: {shown}); "
            "a fine-tune needs one such as LlamaForCausalLM",
        )
    weights = next((name for name in WEIGHT_FILES if name in names), None)
    if weights is None:
        raise InputProblem(field, f"{location} has no weights ({' or '.join(WEIGHT_FILES[::2])})")
    if not any(name in names for name in TOKENIZER_FILES):
        raise InputProblem(
            field, f"{location} has no tokenizer (tokenizer.json or tokenizer_config.json)"
        )
    return ModelSummary(
        model_type=str(config["model_type"]),
        architecture=causal[0],
        weights=weights,
        config=config,
    )
