"""Chapter 10's language model against nanoGPT's CPU recipe, side by side on one machine.

    python benchmarks/lm_vs_nanogpt.py --nanogpt PATH      # PATH: a checkout (or bare git
                                                           # directory) of karpathy/nanoGPT

nanoGPT is never shipped with the course: point ``--nanogpt`` at a snapshot of its public
repository. The script copies it to a temporary folder, writes the companion's shipped tiny
Shakespeare there as ``data/shakespeare_char/input.txt`` (so its ``prepare.py`` downloads
nothing; the split is the same first-90 % rule), and runs its README's laptop recipe::

    python train.py config/train_shakespeare_char.py --device=cpu --compile=False
        --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4
        --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0

(with ``--eval_interval`` set so that it evaluates at the end, and ``--eval_iters=200`` for a
steadier held-out estimate). Then it trains the chapter's model with the chapter's recipe
(``companion.models.gpt``, the same text) and measures its held-out loss on every
non-overlapping window of the held-out text. The two runs alternate (``--pairs`` times) so
that a loaded machine slows both alike; each row gives the wall time, the processor time
and the machine's load. Losses are in nats per character (both models read characters).

This is a benchmark, not a test: its numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NANOGPT_CPU = ["--device=cpu", "--compile=False", "--log_interval=50", "--block_size=64", "--batch_size=12",
               "--n_layer=4", "--n_head=4", "--n_embd=128", "--dropout=0.0", "--always_save_checkpoint=False"]


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text(encoding="utf-8").split()[:3]) if Path("/proc/loadavg").exists() else "?"


def copy_nanogpt(source: Path, dest: Path) -> Path:
    """A working copy of nanoGPT in ``dest`` (from a checkout or a bare git directory)."""
    if (source / "train.py").exists():
        shutil.copytree(source, dest, ignore=shutil.ignore_patterns(".git"))
    else:  # a bare repository: export its HEAD
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "--git-dir", str(source), "archive", "HEAD"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    if not (dest / "train.py").exists():
        raise SystemExit(f"{source} does not look like karpathy/nanoGPT (no train.py)")
    return dest


def prepare(nano: Path) -> None:
    from companion.data.text import load_shakespeare

    data = nano / "data" / "shakespeare_char"
    (data / "input.txt").write_text(load_shakespeare(), encoding="utf-8")
    subprocess.run([sys.executable, "prepare.py"], cwd=data, check=True, capture_output=True)


def run_nanogpt(nano: Path, steps: int, threads: int) -> dict:
    args = [sys.executable, "train.py", "config/train_shakespeare_char.py", *NANOGPT_CPU,
            f"--max_iters={steps}", f"--lr_decay_iters={steps}", f"--eval_interval={steps}", "--eval_iters=200"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    t0, c0 = time.perf_counter(), os.times()
    out = subprocess.run(args, cwd=nano, env=env, capture_output=True, text=True, encoding="utf-8")
    wall, c1 = time.perf_counter() - t0, os.times()
    if out.returncode:
        raise SystemExit(f"nanoGPT failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    evals = re.findall(r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)", out.stdout)
    step, _, val = evals[-1]
    return {"who": "nanoGPT (4 x 128, ctx 64, batch 12)", "steps": int(step), "wall": wall,
            "cpu": c1.children_user + c1.children_system - c0.children_user - c0.children_system,
            "held-out": float(val)}


def run_ours(steps: int, threads: int, seed: int = 0, d_model: int = 64, layers: int = 2, heads: int = 4,
             batch: int = 32, lr: float = 5e-3, context: int = 64, target: float | None = None,
             eval_every: int = 100) -> dict:
    """Train the chapter's GPT (its recipe: Adam, warmup, cosine decay) and measure its held-out
    loss on every non-overlapping window of the held-out text. With ``target``, the held-out
    loss is also measured every ``eval_every`` steps, and the row gives the training time (the
    evaluations' own time left out) at which it first reached ``target``."""
    import torch

    from companion.data.text import shakespeare_split
    from companion.language_model import held_out_loss, window_loss, window_starts
    from companion.models.gpt import GPT, GPTConfig
    from companion.tokenizer import CharTokenizer
    from companion.train import train

    torch.set_num_threads(threads)
    split = shakespeare_split()
    chars = CharTokenizer.from_text(split.train)
    train_ids, held = torch.tensor(chars.encode(split.train)), torch.tensor(chars.encode(split.held_out))
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=chars.vocab_size, context=context, d_model=d_model, num_heads=heads,
                       num_layers=layers)
    model = GPT(config)
    reached = {}
    paused = [0.0, 0.0]  # wall and processor seconds spent evaluating

    def on_log(step, m):
        if target is None or reached or step % eval_every:
            return
        w0, c0 = time.perf_counter(), time.process_time()
        was_training = m.training
        m.eval()
        loss = held_out_loss(m, held, context)
        m.train(was_training)
        paused[0] += time.perf_counter() - w0
        paused[1] += time.process_time() - c0
        if loss <= target:
            reached.update(step=step, wall=time.perf_counter() - t0 - paused[0],
                           cpu=time.process_time() - c0_all - paused[1], loss=loss)

    t0, c0_all = time.perf_counter(), time.process_time()
    train(model, window_loss(train_ids, context), [window_starts(train_ids, context)], steps=steps,
          batch_size=batch, lr=lr, warmup=50, lr_min=lr / 10, seed=seed, device="cpu", progress=False,
          log_every=eval_every if target is not None else 50, on_log=on_log)
    wall, cpu = time.perf_counter() - t0 - paused[0], time.process_time() - c0_all - paused[1]
    row = {"who": f"chapter 10 ({layers} x {d_model}, ctx {context}, batch {batch}, lr {lr:g})", "steps": steps,
           "wall": wall, "cpu": cpu, "held-out": held_out_loss(model, held, context)}
    if target is not None:
        row["reached"] = reached or None
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nanogpt", type=Path, help="a snapshot of karpathy/nanoGPT (needed unless --ours-only)")
    parser.add_argument("--nanogpt-steps", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=600, help="the chapter's training steps")
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--target", type=float, help="also report when the held-out loss first reaches this "
                        "(nats/char; nanoGPT's recipe reaches about 1.88)")
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--ours-only", action="store_true", help="skip nanoGPT (to choose a configuration)")
    args = parser.parse_args(argv)
    rows = []
    if args.nanogpt is None and not args.ours_only:
        parser.error("--nanogpt PATH is needed (or --ours-only)")
    with tempfile.TemporaryDirectory() as tmp:
        nano = None
        if not args.ours_only:
            nano = copy_nanogpt(args.nanogpt, Path(tmp) / "nanoGPT")
            prepare(nano)
        for _ in range(args.pairs):
            runs = [lambda: run_ours(args.steps, args.threads, d_model=args.d_model, layers=args.layers,
                                     heads=args.heads, batch=args.batch, lr=args.lr, context=args.context,
                                     target=args.target, eval_every=args.eval_every)]
            if not args.ours_only:
                runs.append(lambda: run_nanogpt(nano, args.nanogpt_steps, args.threads))
            for run in runs:
                before = load()
                row = run()
                row["load"] = f"{before} -> {load()}"
                rows.append(row)
                print(f"{row['who']:40s} {row['steps']:5d} steps {row['wall']:7.1f} s wall {row['cpu']:7.1f} s CPU "
                      f"held-out {row['held-out']:.3f} nats/char ({row['held-out'] / math.log(2):.3f} bits)  "
                      f"load {row['load']}", flush=True)
                if row.get("reached"):
                    r = row["reached"]
                    print(f"{'':40s} reached {r['loss']:.3f} at step {r['step']}: {r['wall']:.1f} s wall, "
                          f"{r['cpu']:.1f} s CPU of training", flush=True)
                elif "reached" in row:
                    print(f"{'':40s} did not reach {args.target} in {row['steps']} steps", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
