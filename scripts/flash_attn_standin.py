"""flash_attn's two attention functions that TileLang's examples compare against, in torch.

Some of TileLang's examples check their kernels against the flash-attn package
(`flash_attn.flash_attn_varlen_func`, `flash_attn.flash_attn_with_kvcache`), which
installs only with CUDA. Where it is missing, scripts/tilelang_examples.py puts this
module in its place: the same functions, by the semantics flash-attn documents, written
as plain attention in float32 - a slow reference, which is all a check needs.

* Sequences of a batch packed one after another: `cu_seqlens` holds where each starts.
* Grouped heads: query head h reads key/value head h // (heads / kv_heads).
* `causal`: with seqlen_q != seqlen_k the mask is aligned to the bottom right corner -
  query i sees key j where j <= i + seqlen_k - seqlen_q; a query that sees no key
  gives zeros.
* `flash_attn_with_kvcache`: a cache of (batch, seqlen, kv_heads, dim), or a paged one
  of (blocks, page_size, kv_heads, dim) read through `block_table`; `cache_seqlens`
  keys of each sequence are used.

Anything else flash-attn offers (dropout, windows, ALiBi, soft-capping, new keys
appended to the cache, rotary embeddings) is refused by name: no example here uses it.
"""

from __future__ import annotations

import torch

__version__ = "stand-in"
used = False  # set by a call: the runner's row then says whose reference it was


def _attend(q, k, v, scale, causal):
    """One sequence: q (Lq, H, D), k and v (Lk, Hk, D) -> (Lq, H, Dv), in q's dtype."""
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads cannot share {kv_heads} key/value heads")
    k = k.repeat_interleave(heads // kv_heads, dim=1)
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * scale
    lq, lk = q.shape[0], k.shape[0]
    if causal:
        rows = torch.arange(lq, device=q.device)[:, None]
        cols = torch.arange(lk, device=q.device)[None, :]
        scores = scores.masked_fill(cols > rows + (lk - lq), float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a row that sees nothing: 0
    return torch.einsum("hqk,khd->qhd", probs, v.float()).to(q.dtype)


def _refuse(**options):
    for name, (value, default) in options.items():
        if value != default and value is not None:
            raise NotImplementedError(f"the flash_attn stand-in has no {name}={value!r}")


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """q (total_q, H, D), k and v (total_k, Hk, D): each sequence attends to its own."""
    global used
    _refuse(dropout_p=(dropout_p, 0.0), window_size=(tuple(window_size), (-1, -1)),
            softcap=(softcap, 0.0), alibi_slopes=(alibi_slopes, None),
            return_attn_probs=(return_attn_probs, False), block_table=(block_table, None))
    used = True
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    out = q.new_zeros(q.shape[0], q.shape[1], v.shape[-1])
    starts_q, starts_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for (q0, q1), (k0, k1) in zip(zip(starts_q, starts_q[1:]), zip(starts_k, starts_k[1:])):
        out[q0:q1] = _attend(q[q0:q1], k[k0:k1], v[k0:k1], scale, causal)
    return out


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False):
    """q (B, Sq, H, D) against the first cache_seqlens[b] keys of each sequence's cache."""
    global used
    _refuse(k=(k, None), v=(v, None), rotary_cos=(rotary_cos, None),
            cache_leftpad=(cache_leftpad, None), window_size=(tuple(window_size), (-1, -1)),
            softcap=(softcap, 0.0), alibi_slopes=(alibi_slopes, None),
            return_softmax_lse=(return_softmax_lse, False))
    used = True
    batch = q.shape[0]
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    if cache_seqlens is None:
        lengths = [k_cache.shape[1]] * batch
    elif isinstance(cache_seqlens, int):
        lengths = [cache_seqlens] * batch
    else:
        lengths = cache_seqlens.tolist()
    out = q.new_zeros(*q.shape[:3], v_cache.shape[-1])
    for b, length in enumerate(lengths):
        if block_table is not None:  # pages of page_size keys, in the table's order
            page = k_cache.shape[1]
            pages = block_table[b, :(length + page - 1) // page].long()
            keys, values = k_cache[pages].flatten(0, 1), v_cache[pages].flatten(0, 1)
        else:
            row = b if cache_batch_idx is None else int(cache_batch_idx[b])
            keys, values = k_cache[row], v_cache[row]
        out[b] = _attend(q[b], keys[:length], values[:length], scale, causal)
    return out
