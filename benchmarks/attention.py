"""Benchmark multi-head attention: the companion's explicit and fused paths against
``torch.nn.MultiheadAttention``, forward and forward+backward, with peak memory.

    python benchmarks/attention.py            # batch 8, d_model 256, 8 heads, N = 64 ... 2048
    python benchmarks/attention.py --quick    # N = 64 ... 512, shorter measurements
    python benchmarks/attention.py --raschka  # the configuration of Raschka's multi-head benchmark
    python benchmarks/attention.py --raschka --quick   # the same rows, batch 2, 256 tokens, short

``--raschka``: the configuration of the multi-head attention benchmark of *LLMs from Scratch*
(ch03 bonus): batch 8, 1,024 tokens, d = 768, 12 heads, causal, dropout 0, no biases; forward
with autograd on, and forward + backward; one row per way of writing multi-head attention
(:data:`RASCHKA_ROWS`, written for this course), all in one process, their ratios to
``nn.MultiheadAttention(need_weights=False)`` measured in the same run (rows interleaved,
``--rounds`` times, in a new seeded order each round; the best time of each row). ``--flex`` adds FlexAttention compiled with
``torch.compile`` (minutes of compiling on a CPU, and a C++ compiler).

Each (implementation, N) runs in its own process so that its peak memory can be read
(the resident-set high-water mark on a CPU, the allocator's peak on CUDA). Times come from
``torch.utils.benchmark.Timer`` (``companion.profiling.time_call``: warm-up, device
synchronisation, as many runs as fill ``--min-run-time`` seconds; the median per call), on
the default device (``companion.default_device()``). Ratios are against torch's module as most code calls it
(``need_weights=True``, its default), measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

IMPLEMENTATIONS = {
    "companion explicit": "the companion's MultiHeadAttention, explicit path (fused=False)",
    "companion fused": "the companion's MultiHeadAttention, fused path (default)",
    "torch weights": "torch.nn.MultiheadAttention, need_weights=True (its default)",
    "torch no-weights": "torch.nn.MultiheadAttention, need_weights=False",
}
REFERENCE = "torch weights"


def measure(impl: str, n: int, batch: int, d_model: int, heads: int, min_run_time: float) -> dict:
    """Run in a child process: time forward and forward+backward of one implementation."""
    import torch

    import companion
    from companion.multihead import MultiHeadAttention
    from companion.profiling import time_call

    device = companion.default_device()
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(d_model, heads, batch_first=True).to(device)
    if impl.startswith("companion"):
        module = MultiHeadAttention(d_model, heads, fused=(impl == "companion fused")).to(device).load_from_torch(ref)

        def forward(x):
            return module(x)[0]
    else:
        need = impl == "torch weights"

        def forward(x):
            return ref(x, x, x, need_weights=need)[0]

    x = torch.randn(batch, n, d_model, device=device, requires_grad=True)

    def fwd():
        with torch.no_grad():
            forward(x)

    def fwd_bwd():
        forward(x).sum().backward()

    if device.type == "cuda":
        torch.cuda.synchronize()
    baseline_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t_fwd = time_call(fwd, device=device, min_run_time=min_run_time)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
    t_fb = time_call(fwd_bwd, device=device, min_run_time=min_run_time)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() - start
    else:
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline_kib) * 1024
    return {"impl": impl, "n": n, "fwd": t_fwd, "fwd_bwd": t_fb, "peak_bytes": peak, "device": device.type}


# --- Raschka's configuration: one module per way of writing causal multi-head attention -----

RASCHKA = {"batch": 8, "tokens": 1024, "d": 768, "heads": 12}
RASCHKA_REFERENCE = "nn.MultiheadAttention, no weights"


def _raschka_rows(d: int, heads: int, n: int, flex: bool = False) -> dict:
    """``{name: module}``: every row computes the same causal multi-head attention
    ``(B, N, d) -> (B, N, d)`` from the weights of one ``nn.MultiheadAttention`` (no biases)."""
    import math

    import torch
    import torch.nn.functional as F
    from torch import nn

    from companion.flash import tiled_attention
    from companion.masks import causal_mask
    from companion.multihead import MultiHeadAttention

    torch.manual_seed(0)
    ref = nn.MultiheadAttention(d, heads, bias=False, batch_first=True)
    w_q, w_k, w_v = ref.in_proj_weight.detach().chunk(3)  # 3 × (d, d)
    w_o = ref.out_proj.weight.detach()  # (d, d)
    dh = d // heads
    allowed = causal_mask(n)  # (N, N) True = may attend
    blocked = ~allowed  # nn.MultiheadAttention's convention

    def heads_of(t):  # (B, N, d) -> (B, H, N, D_h)
        return t.view(t.shape[0], t.shape[1], heads, dh).transpose(1, 2)

    def merged(t):  # (B, H, N, D_h) -> (B, N, d)
        return t.transpose(1, 2).reshape(t.shape[0], t.shape[2], d)

    class HeadLoop(nn.Module):  # one small attention module per head, run one after another
        def __init__(self):
            super().__init__()
            self.q = nn.ParameterList([nn.Parameter(w) for w in w_q.split(dh)])  # H × (D_h, d)
            self.k = nn.ParameterList([nn.Parameter(w) for w in w_k.split(dh)])
            self.v = nn.ParameterList([nn.Parameter(w) for w in w_v.split(dh)])
            self.o = nn.Parameter(w_o.clone())

        def forward(self, x):
            outs = []
            for wq, wk, wv in zip(self.q, self.k, self.v, strict=True):
                q, k, v = x @ wq.T, x @ wk.T, x @ wv.T  # 3 × (B, N, D_h)
                s = (q @ k.transpose(1, 2) / math.sqrt(dh)).masked_fill(blocked, float("-inf"))  # (B, N, N)
                outs.append(torch.softmax(s, dim=-1) @ v)  # (B, N, D_h)
            return torch.cat(outs, dim=-1) @ self.o.T  # (B, N, d)

    class Separate(nn.Module):  # W_Q, W_K, W_V as three weights, explicit softmax
        def __init__(self, einsum=False):
            super().__init__()
            self.wq, self.wk, self.wv = (nn.Parameter(w.clone()) for w in (w_q, w_k, w_v))
            self.o = nn.Parameter(w_o.clone())
            self.einsum = einsum

        def forward(self, x):
            q, k, v = heads_of(x @ self.wq.T), heads_of(x @ self.wk.T), heads_of(x @ self.wv.T)  # (B, H, N, D_h)
            if self.einsum:
                s = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(dh)  # (B, H, N, N)
                a = torch.softmax(s.masked_fill(blocked, float("-inf")), dim=-1)
                y = torch.einsum("bhqk,bhkd->bhqd", a, v)  # (B, H, N, D_h)
            else:
                s = (q @ k.transpose(-2, -1) / math.sqrt(dh)).masked_fill(blocked, float("-inf"))  # (B, H, N, N)
                y = torch.softmax(s, dim=-1) @ v  # (B, H, N, D_h)
            return merged(y) @ self.o.T  # (B, N, d)

    class Combined(nn.Module):  # one QKV weight (d, 3d); the attention step chosen by `kind`
        def __init__(self, kind):
            super().__init__()
            self.qkv = nn.Parameter(ref.in_proj_weight.detach().clone())
            self.o = nn.Parameter(w_o.clone())
            self.kind = kind

        def forward(self, x):
            q, k, v = (heads_of(t) for t in (x @ self.qkv.T).chunk(3, dim=-1))  # 3 × (B, H, N, D_h)
            if self.kind == "explicit":
                s = (q @ k.transpose(-2, -1) / math.sqrt(dh)).masked_fill(blocked, float("-inf"))
                y = torch.softmax(s, dim=-1) @ v
            elif self.kind == "is_causal":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            elif self.kind == "mask":
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
            elif self.kind == "tiled":
                y = tiled_attention(q, k, v, causal=True, block_q=128, block_k=128)
            else:  # FlexAttention, compiled
                y = self.flex(q, k, v, block_mask=self.block_mask)
            return merged(y) @ self.o.T  # (B, N, d)

    class Torch(nn.Module):
        def __init__(self, need_weights):
            super().__init__()
            self.mha, self.need_weights = ref, need_weights

        def forward(self, x):
            return self.mha(x, x, x, attn_mask=blocked, is_causal=True, need_weights=self.need_weights)[0]

    class Companion(nn.Module):
        def __init__(self, fused, causal_flag=True):
            super().__init__()
            self.mha = MultiHeadAttention(d, heads, bias=False, fused=fused).load_from_torch(ref)
            self.causal_flag = causal_flag

        def forward(self, x):
            if self.causal_flag:
                return self.mha(x, causal=True)[0]
            return self.mha(x, mask=allowed)[0]

    rows = {
        "heads in a Python loop": HeadLoop(),
        "separate Q/K/V weights": Separate(),
        "one QKV weight": Combined("explicit"),
        "einsum": Separate(einsum=True),
        "SDPA is_causal=True": Combined("is_causal"),
        "SDPA, mask tensor": Combined("mask"),
        "nn.MultiheadAttention, weights": Torch(True),
        RASCHKA_REFERENCE: Torch(False),
        "companion explicit": Companion(False),
        "companion fused": Companion(True),
        "companion fused, mask tensor": Companion(True, causal_flag=False),
        "companion tiled": Combined("tiled"),
    }
    if flex:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        row = Combined("flex")
        row.flex = torch.compile(flex_attention)
        row.block_mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, n, n, device="cpu")
        rows["FlexAttention (compiled)"] = row
    return rows


def raschka(args) -> None:
    import platform
    import random

    import torch

    from companion.profiling import measure
    from companion.progress import tqdm

    cfg = dict(RASCHKA)
    min_run_time, rounds = args.min_run_time, args.rounds
    if args.quick:
        cfg.update(batch=2, tokens=256)
        min_run_time, rounds = 0.05, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = _raschka_rows(cfg["d"], cfg["heads"], cfg["tokens"], flex=args.flex)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(cfg["batch"], cfg["tokens"], cfg["d"], generator=g)
    with torch.no_grad():  # every row computes the same function
        expected = rows[RASCHKA_REFERENCE](x[:1])
        for name, row in rows.items():
            torch.testing.assert_close(row(x[:1]), expected, atol=1e-4, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")

    def forward(row):
        return lambda: row(x)  # autograd on: the graph is built, as in training

    def forward_backward(row):
        def run():
            row.zero_grad(set_to_none=True)
            row(x).sum().backward()
        return run

    times = {(name, p): [] for name in rows for p in ("fwd", "fwd_bwd")}
    load = [os.getloadavg()[0]]
    order = list(rows)
    shuffle = random.Random(0)  # seeded: the same orders in every run
    for _ in tqdm(range(rounds), desc="rounds"):
        shuffle.shuffle(order)  # a new order each round: no row always runs after the same one
        for name in order:  # interleaved: a change of load hits every row alike
            row = rows[name]
            for p, make in (("fwd", forward), ("fwd_bwd", forward_backward)):
                times[name, p] += measure(make(row), min_run_time=min_run_time).times
        load.append(os.getloadavg()[0])
    best = {key: min(ts) for key, ts in times.items()}
    results = [{"row": name, "fwd": best[name, "fwd"], "fwd_bwd": best[name, "fwd_bwd"],
                "fwd_ratio": best[name, "fwd"] / best[RASCHKA_REFERENCE, "fwd"],
                "fwd_bwd_ratio": best[name, "fwd_bwd"] / best[RASCHKA_REFERENCE, "fwd_bwd"]} for name in rows]
    lines = [f"Causal multi-head attention, batch {cfg['batch']}, {cfg['tokens']} tokens, d = {cfg['d']}, "
             f"{cfg['heads']} heads, dropout 0, no biases (Raschka's configuration{', --quick' if args.quick else ''})",
             f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
             f"{rounds} round(s) of {min_run_time} s per row and pass, rows in a new seeded order each round, best time; load average "
             f"{min(load):.1f} to {max(load):.1f} during the run",
             f"ratio = time / time of {RASCHKA_REFERENCE} in the same run", ""]
    header = f"{'row':<32} {'fwd ms':>9} {'ratio':>6} {'fwd+bwd ms':>11} {'ratio':>6}"
    lines += [header, "-" * len(header)]
    for r in results:
        lines.append(f"{r['row']:<32} {1e3 * r['fwd']:9.1f} {r['fwd_ratio']:6.2f} {1e3 * r['fwd_bwd']:11.1f} "
                     f"{r['fwd_bwd_ratio']:6.2f}")
    print("\n".join(lines))
    if args.json:
        meta = {"config": cfg, "torch": torch.__version__, "threads": torch.get_num_threads(), "rounds": rounds,
                "min_run_time": min_run_time, "load": load, "reference": RASCHKA_REFERENCE}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "rows": results}, f, indent=1)
    if args.table:
        with open(args.table, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048])
    parser.add_argument("--min-run-time", type=float, default=0.5,
                        help="seconds of measurement per implementation, N and pass (default 0.5)")
    parser.add_argument("--quick", action="store_true", help="N = 64 ... 512 and 0.2 s per measurement")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--raschka", action="store_true", help="Raschka's configuration and rows (see above)")
    parser.add_argument("--rounds", type=int, default=3, help="--raschka: rounds over all rows (default 3)")
    parser.add_argument("--threads", type=int, help="--raschka: torch.set_num_threads (default: torch's)")
    parser.add_argument("--flex", action="store_true", help="--raschka: add FlexAttention (torch.compile)")
    parser.add_argument("--table", help="--raschka: also write the table to this file")
    args = parser.parse_args()
    if args.raschka:
        raschka(args)
        return

    if args.child:  # one measurement, printed as JSON for the parent
        impl, n = args.child.rsplit(":", 1)
        print(json.dumps(measure(impl, int(n), args.batch, args.d_model, args.heads, args.min_run_time)))
        return

    lengths = [n for n in args.lengths if n <= 512] if args.quick else args.lengths
    min_run_time = 0.2 if args.quick else args.min_run_time
    results = []
    for n in lengths:
        for impl in IMPLEMENTATIONS:
            cmd = [sys.executable, __file__, "--child", f"{impl}:{n}", "--batch", str(args.batch),
                   "--d-model", str(args.d_model), "--heads", str(args.heads), "--min-run-time", str(min_run_time)]
            out = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
            if out.returncode != 0:
                print(f"{impl} at N={n} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
                continue
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            r = results[-1]
            print(f"  measured {impl:<18} N={n:<5} fwd {1e3 * r['fwd']:9.2f} ms  fwd+bwd {1e3 * r['fwd_bwd']:9.2f} ms",
                  file=sys.stderr, flush=True)

    device = results[0]["device"] if results else "?"
    print(f"\nMulti-head attention, batch {args.batch}, d_model {args.d_model}, {args.heads} heads, device {device}")
    print("ratio = time / time of torch.nn.MultiheadAttention (need_weights=True) at the same N\n")
    header = f"{'N':>5}  {'implementation':<18} {'fwd ms':>9} {'ratio':>6} {'fwd+bwd ms':>11} {'ratio':>6} {'peak MiB':>9}"
    print(header)
    print("-" * len(header))
    for n in lengths:
        rows = {r["impl"]: r for r in results if r["n"] == n}
        ref = rows.get(REFERENCE)
        for impl, r in rows.items():
            rf = r["fwd"] / ref["fwd"] if ref else float("nan")
            rb = r["fwd_bwd"] / ref["fwd_bwd"] if ref else float("nan")
            print(f"{n:>5}  {impl:<18} {1e3 * r['fwd']:9.2f} {rf:6.2f} {1e3 * r['fwd_bwd']:11.2f} {rb:6.2f} "
                  f"{r['peak_bytes'] / 2**20:9.1f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
