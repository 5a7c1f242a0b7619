"""How fast submit-time dataset checks read a JSONL file, against parsing
the same file with nothing but ``json.loads`` per line, in the same run.

Every fine-tune submission (and plan) reads its datasets whole on the control
plane, so this is the price of "a malformed line is a 422, not a failed
attempt". Measured on a generated prompt/completion file of ``--rows`` rows:

  - baseline: ``for line in file: json.loads(line)``, the least any check can do
  - trainplane: ``inputs.check_dataset`` (objects, one format, string fields,
    non-empty completions, line numbers for errors)

Target: >= 0.6x the baseline's rows per second.

    .venv/bin/python benchmarks/dataset_check.py [--rows 500000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from trainplane.recipes.finetune.inputs import check_dataset

TARGET_RATIO = 0.6


def write_rows(path: Path, rows: int) -> int:
    with path.open("w") as handle:
        for i in range(rows):
            prompt = f"Summarise ticket {i}: the customer reports that the export button fails."
            handle.write(json.dumps({"prompt": prompt, "completion": f" Export fails ({i})."}))
            handle.write("\n")
    return path.stat().st_size


def bare_parse(path: Path) -> int:
    count = 0
    with path.open("rb") as handle:
        for line in handle:
            json.loads(line)
            count += 1
    return count


def best_of(repeats: int, fn, *args):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn(*args)
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "train.jsonl"
        size = write_rows(path, args.rows)
        base_s, parsed = best_of(args.repeats, bare_parse, path)
        ours_s, summary = best_of(args.repeats, check_dataset, "dataset.train", str(path))
    assert parsed == summary.rows == args.rows
    ratio = base_s / ours_s
    print(f"file: {args.rows} rows, {size / 1e6:.1f} MB")
    print(f"baseline  json.loads per line   {args.rows / base_s:12,.0f} rows/s  {base_s:.2f} s")
    print(f"trainplane check_dataset        {args.rows / ours_s:12,.0f} rows/s  {ours_s:.2f} s")
    print(f"ratio {ratio:.2f}x (target >= {TARGET_RATIO}x)")
    print(f"a 1 GB dataset is checked in about {ours_s * 1e9 / size:.1f} s")
    if ratio < TARGET_RATIO:
        raise SystemExit(f"below target: {ratio:.2f}x < {TARGET_RATIO}x")


if __name__ == "__main__":
    main()
