"""Benchmark multi-head attention: the companion's explicit and fused paths against
``torch.nn.MultiheadAttention``, forward and forward+backward, with peak memory.

    python benchmarks/attention.py            # batch 8, d_model 256, 8 heads, N = 64 ... 2048
    python benchmarks/attention.py --quick    # N = 64 ... 512, shorter measurements

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
    args = parser.parse_args()

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
