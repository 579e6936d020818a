"""Input checks shared by the launchers: clear PyTorch-style errors before any Triton code runs."""

from __future__ import annotations

import math
import numbers
import os

import torch

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def interpreter_enabled() -> bool:
    """True when Triton was told to interpret kernels (read when @triton.jit decorates)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def interpreter_blocker() -> str | None:
    """Why Triton's CPU interpreter cannot run flashcore's kernels in this environment, or None.

    Triton 3.6's interpreter calls int() on one-element arrays, which numpy 2.4 rejects
    (every kernel then fails with "only 0-dimensional arrays can be converted"); the package
    pins numpy < 2.4, but an existing environment (a GPU image) may carry a newer one."""
    import numpy
    import triton

    def major_minor(version: str) -> tuple[int, int]:
        major, minor = version.split(".")[:2]
        return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)

    if major_minor(triton.__version__) < (3, 7) and major_minor(numpy.__version__) >= (2, 4):
        return (
            f"Triton {triton.__version__}'s interpreter needs numpy < 2.4 "
            f"(this environment has numpy {numpy.__version__})"
        )
    return None


def on_interpreter(t: torch.Tensor) -> bool:
    return t.device.type == "cpu"


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def check_attention_inputs(
    q, k, v, *, max_head_dim: int, value_head_dim: bool = False, paged: bool = False
) -> None:
    """Validate (B, Hq, Sq, D) / (B, Hkv, Sk, D) attention inputs; raise on anything the
    kernels do not compute correctly. ``value_head_dim``: v may have a head dim of its own,
    ``(B, Hkv, Sk, D_v)`` with D_v in [1, max_head_dim] (the Triton forward and backward);
    False: v must have k's shape (the paths that do not support it say so). ``paged``: k, v
    are page pools (num_pages, Hkv, page_size, D), whose first dim is not the batch."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"expected {name} to be a torch.Tensor, got {type(t).__name__}")
    if not (q.dim() == k.dim() == v.dim() == 4):
        raise ValueError(
            "expected q, k, v to be 4-D (batch, heads, seq_len, head_dim), got "
            f"{q.dim()}-D, {k.dim()}-D, {v.dim()}-D"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(
            "expected q, k, v to have the same dtype, got "
            f"{_dtype_name(q)}, {_dtype_name(k)}, {_dtype_name(v)}"
        )
    if q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"expected q, k, v to be float16, bfloat16 or float32, got {_dtype_name(q)}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"expected q, k, v on the same device, got {q.device}, {k.device}, {v.device}"
        )
    if q.device.type not in ("cuda", "cpu"):
        raise ValueError(
            f"expected CUDA tensors (or CPU under the Triton interpreter), got {q.device}"
        )
    if q.device.type == "cpu":
        if not interpreter_enabled():
            raise RuntimeError(
                "CPU tensors run only under the Triton interpreter: set TRITON_INTERPRET=1 "
                "before importing flashcore (or move the tensors to a CUDA device)"
            )
        if q.dtype == torch.bfloat16:
            raise TypeError(
                "bfloat16 is not supported on CPU: the Triton interpreter's bfloat16 dot "
                "returns wrong results; use float16 or float32, or a CUDA device"
            )
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(
            "expected k and v to have the same shape"
            + (" but the head_dim" if value_head_dim else "")
            + f", got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    if k.shape[3] != v.shape[3] and not value_head_dim:
        raise ValueError(
            f"expected k and v to have the same shape, got {tuple(k.shape)} and "
            f"{tuple(v.shape)}: this function does not support a v head_dim ({v.shape[3]}) "
            f"different from q/k's ({k.shape[3]}); flashcore.attention and attention_varlen do"
        )
    if q.shape[0] != k.shape[0] and not paged:
        raise ValueError(
            f"expected q, k, v to have the same batch size, got {q.shape[0]} and {k.shape[0]}"
        )
    if q.shape[3] != k.shape[3]:
        raise ValueError(
            f"expected q and k to have the same head_dim, got {q.shape[3]} and {k.shape[3]}"
        )
    head_dim = q.shape[3]
    if not 1 <= head_dim <= max_head_dim:
        raise ValueError(f"head_dim must be in [1, {max_head_dim}], got {head_dim}")
    if not 1 <= v.shape[3] <= max_head_dim:
        raise ValueError(f"v's head_dim (D_v) must be in [1, {max_head_dim}], got {v.shape[3]}")
    num_q_heads, num_kv_heads = q.shape[1], k.shape[1]
    if num_kv_heads == 0 and num_q_heads != 0:
        raise ValueError(f"expected at least one key/value head for {num_q_heads} query heads")
    if num_kv_heads and num_q_heads % num_kv_heads != 0:
        raise ValueError(
            "expected the number of query heads to be a multiple of the number of key/value "
            f"heads (GQA/MQA), got Hq={num_q_heads}, Hkv={num_kv_heads}"
        )
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise RuntimeError(
            "flashcore attention is forward-only (no backward); call it under "
            "torch.no_grad() / torch.inference_mode() or detach the inputs"
        )


def check_window(window, causal: bool) -> None:
    """A sliding window is a positive int and only defined for causal attention."""
    if window is None:
        return
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"expected window to be an int or None, got {type(window).__name__}")
    if window < 1:
        raise ValueError(
            f"expected window >= 1 (keys each query sees, itself included), got {window}"
        )
    if not causal:
        raise ValueError(
            "window requires causal=True (a sliding window looks back from the diagonal)"
        )


def check_kvcache_inputs(
    q, k_cache, v_cache, cache_seqlens, k_new, v_new, out, block_table=None
) -> bool:
    """Validate KV-cache attention inputs; returns whether new tokens are to be appended.
    Everything here runs before the cache is written, so a bad call leaves it untouched.
    With a ``block_table`` the caches are page pools (check_block_table)."""
    paged = block_table is not None
    check_attention_inputs(q, k_cache, v_cache, max_head_dim=256, paged=paged)
    if paged:
        check_block_table(block_table, q, k_cache)
    if q.dtype == torch.float32 and q.device.type == "cuda":
        raise TypeError("expected float16 or bfloat16 for KV-cache attention on CUDA, got float32")
    batch, _, seqlen_new, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    if (
        not isinstance(cache_seqlens, torch.Tensor)
        or cache_seqlens.dim() != 1
        or cache_seqlens.shape[0] != batch
    ):
        got = (
            tuple(cache_seqlens.shape)
            if isinstance(cache_seqlens, torch.Tensor)
            else type(cache_seqlens).__name__
        )
        raise ValueError(f"expected cache_seqlens to be a 1-D tensor of {batch} lengths, got {got}")
    if cache_seqlens.dtype not in (torch.int32, torch.int64):
        raise TypeError(
            f"expected cache_seqlens to be int32 or int64, got {_dtype_name(cache_seqlens)}"
        )
    if cache_seqlens.device != q.device:
        raise ValueError(f"expected cache_seqlens on {q.device}, got {cache_seqlens.device}")
    if (k_new is None) != (v_new is None):
        raise ValueError("expected k_new and v_new to be given together (or both None)")
    if k_new is not None:
        expected = (batch, num_kv_heads, seqlen_new, head_dim)
        for name, t in (("k_new", k_new), ("v_new", v_new)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"expected {name} to be a torch.Tensor, got {type(t).__name__}")
            if tuple(t.shape) != expected:
                raise ValueError(
                    f"expected {name} of shape (B, Hkv, Sn, D) = {expected}, got {tuple(t.shape)}"
                )
            if t.dtype != q.dtype or t.device != q.device:
                raise TypeError(
                    f"expected {name} to be {_dtype_name(q)} on {q.device}, got "
                    f"{_dtype_name(t)} on {t.device}"
                )
        capacity = kvcache_capacity(k_cache, block_table)
        if seqlen_new > capacity:
            raise ValueError(f"cache too small: {seqlen_new} new tokens, capacity {capacity}")
    if out is not None and (out.shape != q.shape or out.dtype != q.dtype or out.device != q.device):
        raise ValueError(
            f"expected out to match q (shape {tuple(q.shape)}, {q.dtype}, {q.device}), got "
            f"shape {tuple(out.shape)}, {out.dtype}, {out.device}"
        )
    return k_new is not None


def kvcache_capacity(k_cache, block_table) -> int:
    """Positions a sequence's cache can hold: S_max, or max_pages_per_seq * page_size."""
    if block_table is None:
        return k_cache.shape[2]
    return block_table.shape[1] * k_cache.shape[2]


def check_block_table(block_table, q, k_pool) -> None:
    """A block table ``(B, max_pages_per_seq)`` int32 on q's device for page pools
    ``(num_pages, Hkv, page_size, D)`` (k and v pools of one shape: check_attention_inputs)."""
    batch = q.shape[0]
    if not isinstance(block_table, torch.Tensor):
        raise TypeError(
            f"expected block_table to be a torch.Tensor or None, got {type(block_table).__name__}"
        )
    if block_table.dtype != torch.int32:
        raise TypeError(f"expected block_table to be int32, got {_dtype_name(block_table)}")
    if block_table.device != q.device:
        raise ValueError(
            f"expected block_table on {q.device} (q's device), got {block_table.device}"
        )
    if block_table.dim() != 2 or block_table.shape[0] != batch or block_table.shape[1] < 1:
        raise ValueError(
            f"expected block_table of shape (B, max_pages_per_seq) = ({batch}, >= 1), got "
            f"{tuple(block_table.shape)}"
        )
    num_pages, _, page_size, _ = k_pool.shape
    if num_pages < 1 or page_size < 1:
        raise ValueError(
            "expected k_cache/v_cache page pools (num_pages, Hkv, page_size, D) with at least "
            f"one page of at least one row, got {tuple(k_pool.shape)}"
        )


def check_cache_lengths(cache_seqlens, appended: int, k_cache, block_table) -> int:
    """The device checks of a KV-cache call (a bad call raises before anything is written):
    ``0 <= cache_seqlens`` and ``cache_seqlens + appended`` within each sequence's capacity;
    with a block table, every page id that positions [0, cache_seqlens[b] + appended) of
    sequence b use is in [0, num_pages). One device-to-host copy, whose wait for the stream
    is the check's cost: the lengths themselves (B ints, their range taken on the host), or
    with a block table the range and the page verdict computed on the device together.
    (Until 2026-11-30: a device range whose two ends were read one at a time, and the page
    verdict a third read; each read waits for the device.) Returns the longest sequence
    after the append."""
    capacity = kvcache_capacity(k_cache, block_table)
    if block_table is None:
        lo, hi = (int(x) for x in torch.aminmax(cache_seqlens.cpu()))
        bad_page = 0
    else:
        num_pages, page_size = k_cache.shape[0], k_cache.shape[2]
        lengths = cache_seqlens.to(torch.long)
        used = (lengths + appended + page_size - 1) // page_size
        slots = torch.arange(block_table.shape[1], device=block_table.device)
        bad = (slots[None, :] < used[:, None]) & ((block_table < 0) | (block_table >= num_pages))
        lo_d, hi_d = torch.aminmax(lengths)
        lo, hi, bad_page = torch.stack((lo_d, hi_d, bad.any().to(torch.long))).tolist()
    if lo < 0 or hi + appended > capacity:
        need = (
            "0 <= cache_seqlens and cache_seqlens + Sn <= S_max"
            if appended
            else "0 <= cache_seqlens <= S_max"
        )
        pages = "" if block_table is None else " (max_pages_per_seq * page_size)"
        raise ValueError(
            f"expected {need} for every sequence (Sn={appended}, S_max={capacity}{pages}), "
            f"got cache_seqlens in [{lo}, {hi}]; the cache was not modified"
        )
    if bad_page:
        b, j = (int(x) for x in bad.nonzero()[0])
        raise ValueError(
            f"expected block_table entries in [0, {num_pages}) (num_pages of the pool) for the "
            f"pages the call uses, got block_table[{b}, {j}] = {int(block_table[b, j])} "
            f"(sequence {b} uses its first {int(used[b])} pages); the cache was not modified"
        )
    return hi + appended


def check_scale(scale) -> None:
    """A softmax scale, when given, is a finite number >= 0. Every kernel folds the scale into
    the row max as max(s) * scale, the max of the scaled scores only when scale >= 0: with a
    negative one, exp2 of the scores less that max overflows (fp16's P from a range of 16 in
    log2 units) and the output is NaN."""
    if scale is None:
        return
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):  # numpy scalars pass
        raise TypeError(f"expected scale to be a float or None, got {type(scale).__name__}")
    if not 0 <= scale < math.inf:
        raise ValueError(
            f"expected scale to be finite and >= 0 (the kernels fold it into the row max), "
            f"got {scale}"
        )


def check_softcap(softcap) -> None:
    if softcap is None:
        return
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
        raise TypeError(f"expected softcap to be a float or None, got {type(softcap).__name__}")
    if not 0 < softcap < math.inf:
        raise ValueError(
            f"expected softcap > 0 (logits become softcap * tanh(s / softcap)), got {softcap}"
        )


def check_sinks(sinks, q):
    """``sinks`` as the kernels read it: (Hq,) float32 contiguous on q's device, or None.
    Raises for anything else (before anything is written)."""
    if sinks is None:
        return None
    if not isinstance(sinks, torch.Tensor):
        raise TypeError(f"expected sinks to be a tensor or None, got {type(sinks).__name__}")
    num_q_heads = q.shape[1] if q.dim() == 4 else q.shape[-2]
    if sinks.dim() != 1 or sinks.shape[0] != num_q_heads:
        raise ValueError(
            f"expected sinks of shape ({num_q_heads},), one logit per query head, got "
            f"{tuple(sinks.shape)}"
        )
    if not sinks.dtype.is_floating_point or sinks.dtype == torch.float64:
        raise TypeError(
            f"expected sinks to be float32, float16 or bfloat16, got {_dtype_name(sinks)}"
        )
    if sinks.device != q.device:
        raise ValueError(f"expected sinks on {q.device} (q's device), got {sinks.device}")
    return sinks.detach().float().contiguous()
