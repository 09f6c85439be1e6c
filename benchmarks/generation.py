"""Per-token generation time of chapter 10's GPT (``scale="cpu"``), and its greedy output.

    PYTHONPATH=$PWD python benchmarks/generation.py                 # this checkout
    PYTHONPATH=/path/to/old python benchmarks/generation.py --json  # another checkout, one line

The model is chapter 10's ``scale="cpu"`` configuration (65 characters, context 64, d = 64,
4 heads, 2 layers), built with a seed and every parameter moved by ``0.1 · N(0, 1)`` so that it
is not the near-uniform model of a fresh initialisation (greedy text then varies). Each
measurement is ``model.generate(prompt, 63, temperature=0)`` (a one-token prompt, the whole
context) with the cache, on one thread, in processor time (less disturbed by a busy machine
than wall-clock time), ``--repeats`` times; the report is the median and the minimum per token.
A hash of the greedy tokens (cache on and off, and a batch of four sampled rows) lets two
checkouts be compared: the same hash, the same outputs.

To compare two checkouts, run them back to back, alternating, several times (``--rounds``
in a shell loop), on the same machine, and compare the medians.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time

import torch

import companion
from companion.models.gpt import GPT, GPTConfig


def build(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=65, context=64, d_model=64, num_heads=4, num_layers=2)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def outputs(model: GPT) -> dict[str, list[list[int]]]:
    """Greedy with and without the cache, and a sampled batch (top-k and top-p) of four rows."""
    prompt = torch.tensor([[0]])
    gen = torch.Generator().manual_seed(0)
    return {
        "greedy_cache": model.generate(prompt, 63, temperature=0, use_cache=True).tolist(),
        "greedy_nocache": model.generate(prompt, 100, temperature=0, use_cache=False).tolist(),
        "sampled": model.generate(torch.tensor([[0], [1], [2], [3]]), 63, temperature=0.8, top_k=20,
                                  top_p=0.9, generator=gen).tolist(),
    }


def per_token_seconds(model: GPT, repeats: int, n: int = 63) -> list[float]:
    prompt = torch.tensor([[0]])
    model.generate(prompt, n, temperature=0)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        model.generate(prompt, n, temperature=0)
        times.append((time.process_time() - t0) / n)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", action="store_true", help="one JSON line")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = build()
    outs = outputs(model)
    digest = hashlib.sha256(json.dumps(outs).encode()).hexdigest()[:16]
    times = per_token_seconds(model, args.repeats)
    result = {"companion": companion.__file__, "outputs_sha": digest,
              "median_us": 1e6 * statistics.median(times), "min_us": 1e6 * min(times)}
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:12s} {v:.1f}" if isinstance(v, float) else f"{k:12s} {v}")


if __name__ == "__main__":
    main()
