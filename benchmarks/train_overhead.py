"""What ``companion.train`` costs per step beyond the optimiser step itself (issue #42).

Chapter 10's GPT at its CPU scale (2 layers, d = 64, context 64, batch 32) is trained for
``--steps`` steps twice per thread count: once by a bare loop (draw 32 windows, forward,
backward, clip, Adam) and once by ``companion.train`` with the chapter's arguments (warmup,
cosine decay, logging every tenth of the run). Each is reported as wall-clock and CPU
milliseconds per step, with the load average, so that a loop overhead (checks, progress bar,
copies) shows as train > bare at the same thread count, and thread contention as the gap
between the thread counts.

    python benchmarks/train_overhead.py                  # 1 and 2 threads, 30 steps each
    python benchmarks/train_overhead.py --threads 1 --steps 100
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from companion.language_model import window_loss, window_starts
from companion.models.gpt import GPT, GPTConfig
from companion.train import train

CONFIG = GPTConfig(vocab_size=65, context=64, d_model=64, num_heads=4, num_layers=2)


def bare_loop(ids: torch.Tensor, steps: int, batch_size: int) -> None:
    """The optimiser step alone: forward, backward, clipping and Adam on random windows."""
    torch.manual_seed(0)
    model = GPT(CONFIG)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    loss_fn = window_loss(ids, CONFIG.context)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - CONFIG.context - 1, (batch_size,), generator=gen)
        loss = loss_fn(model, starts)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()


def with_train(ids: torch.Tensor, steps: int, batch_size: int) -> None:
    """The same steps through ``companion.train``, with chapter 10's arguments."""
    torch.manual_seed(0)
    model = GPT(CONFIG)
    train(model, window_loss(ids, CONFIG.context), [window_starts(ids, CONFIG.context)], steps=steps,
          batch_size=batch_size, lr=5e-3, warmup=min(50, steps), lr_min=5e-4, device="cpu",
          log_every=max(steps // 10, 1), progress=False)


def per_step(fn, *args, steps: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per step of ``fn(*args)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    return 1000 * (time.perf_counter() - wall) / steps, 1000 * (time.process_time() - cpu) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    ids = torch.randint(0, CONFIG.vocab_size, (1_000_000,), generator=torch.Generator().manual_seed(0))
    bare_loop(ids, 2, args.batch)  # warm-up: the first optimiser imports torch._dynamo (seconds)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {args.steps} steps, batch {args.batch}")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for name, fn in (("bare loop", bare_loop), ("companion.train", with_train)):
            load = os.getloadavg()[0]
            wall, cpu = per_step(fn, ids, args.steps, args.batch, steps=args.steps)
            print(f"{threads} thread(s)  {name:16s} {wall:8.1f} ms wall  {cpu:8.1f} ms CPU per step"
                  f"   load {load:.1f} -> {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
