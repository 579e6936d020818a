"""Decode GPU time by split count, beside SDPA's backends (CUDA machine).

    python tools/decode_splits.py [out.json] [--record]

--record writes results/<gpu>/decode_splits.json with provenance.

For each decode shape (bf16, q_len 1; the bench decode suite's shapes and the generation
model's), CUDA-graph replay time of the split-KV kernel at each split count (the chosen
one marked) and of SDPA cuDNN / flash / efficient. Each graph holds one call on each of
5 input sets (K/V beyond L2 for the long caches); time = replay / 5, median of 3.
"""

import json
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashcore.kernels import decode

SETS = 5
SHAPES = [  # B, Hq, Hkv, Sk, D
    (1, 32, 8, 8192, 128),
    (8, 32, 8, 8192, 128),
    (32, 32, 8, 4096, 128),
    (1, 32, 8, 32768, 128),
    (4, 32, 8, 32768, 128),
    (1, 32, 8, 131072, 128),
    (1, 32, 32, 8192, 128),
    (1, 32, 32, 32768, 128),
    (4, 32, 32, 32768, 128),
    (1, 32, 32, 131072, 128),
    (1, 16, 4, 640, 64),  # the generation model's decode steps
    (8, 16, 4, 640, 64),
    (1, 32, 8, 1024, 128),
    (1, 32, 8, 2048, 128),
]
SPLITS = [1, 2, 4, 8, 16, 32, 64, 128]


def graph_us(fns, replays):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in fns:
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / replays / len(fns) * 1e3)
    return statistics.median(times)


def main():
    rows = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for b, hq, hkv, sk, d in SHAPES:
        sets = [
            tuple(
                torch.randn(*s, device="cuda", dtype=torch.bfloat16)
                for s in ((b, hq, 1, d), (b, hkv, sk, d), (b, hkv, sk, d))
            )
            for _ in range(SETS)
        ]
        kv_bytes = 2 * b * hkv * sk * d * 2
        replays = max(10, min(200, int(2e9 / kv_bytes / SETS)))
        chosen = decode.choose_num_splits(b, hkv, 1, sk, 64 if d <= 128 else 32, sms, d)
        row = {"B": b, "Hq": hq, "Hkv": hkv, "Sk": sk, "D": d, "chosen": chosen, "flashcore": {}}
        for s in SPLITS:
            if s > 1 and sk / s < 64:
                continue
            fns = [lambda t=t, s=s: decode.attend_full_cache(*t, num_splits=s) for t in sets]
            row["flashcore"][s] = graph_us(fns, replays)
        for name, backend in (
            ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
            ("sdpa_flash", SDPBackend.FLASH_ATTENTION),
            ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION),
        ):
            try:
                with sdpa_kernel(backend):
                    fns = [
                        lambda t=t: torch.nn.functional.scaled_dot_product_attention(
                            *t, enable_gqa=hq != hkv
                        )
                        for t in sets
                    ]
                    row[name] = graph_us(fns, replays)
            except RuntimeError as err:
                row[name] = None
                row[name + "_error"] = str(err).splitlines()[0][:120]
        best = min(v for k, v in row.items() if k.startswith("sdpa_") and isinstance(v, float))
        fc = row["flashcore"]
        row["best_sdpa_us"] = best
        row["best_split"] = min(fc, key=fc.get)
        ch = fc.get(chosen) or fc.get(min(fc, key=lambda s: abs(s - chosen)))
        print(
            f"B{b} {hq}/{hkv} Sk{sk} D{d}: "
            + " ".join(f"{s}:{t:.1f}" for s, t in fc.items())
            + f" | chosen {chosen}: {ch:.1f} best {row['best_split']}: {fc[row['best_split']]:.1f}"
            + f" | cudnn {row['sdpa_cudnn'] or 0:.1f} flash {row['sdpa_flash'] or 0:.1f}"
            + f" eff {row['sdpa_efficient'] or 0:.1f} | best/ours {best / ch:.3f}"
            + f" copy-GB/s {kv_bytes / ch / 1e3:.0f}",
            flush=True,
        )
        rows.append(row)
        del sets
        torch.cuda.empty_cache()
    payload = {
        "sms": sms,
        "rows": rows,
        "method": f"CUDA-graph replay of one call on each of {SETS} input sets, time / "
        f"{SETS}, median of 3; bf16, q_len 1; flashcore = attend_full_cache(num_splits=s); "
        "'chosen' = choose_num_splits",
    }
    paths = [a for a in sys.argv[1:] if not a.startswith("--")]
    if paths:
        with open(paths[0], "w") as f:
            json.dump(payload, f, indent=1)
    if "--record" in sys.argv:
        from flashcore.results import write_result

        print("recorded", write_result("decode_splits", payload))


if __name__ == "__main__":
    main()
