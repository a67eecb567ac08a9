"""Exercise `paged_kv`: a paged KV cache (vLLM's PagedAttention layout) and attention read through it.

Grade it with `drill check paged_kv.py`. `PagedKVCache` and `paged_attention`
are graded; you may add helpers in this file.

Contract
--------
PagedKVCache(num_blocks, block_size, n_kv_heads, d_head, dtype=torch.float32)
    k_pool, v_pool: (num_blocks, block_size, n_kv_heads, d_head) tensors of `dtype`,
    made once in __init__. Every sequence's keys and values live there and nowhere
    else: no tensor reachable from the cache but the two pools may hold more than
    num_blocks elements.
    allocate(seq_id)            a new empty sequence (no block yet); ValueError if seq_id is live.
    append(seq_id, k, v)        k, v: (T_new, n_kv_heads, d_head) become positions T .. T + T_new - 1.
    free(seq_id)                its blocks go back to the free pool; the id is unknown afterwards.
    gather(seq_id) -> (k, v)    each (T, n_kv_heads, d_head): new contiguous tensors.
    block_table(seq_id) -> list[int]   its physical block ids in logical order.
    num_free_blocks() -> int
    Position p of a sequence is k_pool[table[p // block_size], p % block_size]
    (the grader reads your pools through your block_table). A sequence of T
    positions holds exactly ceil(T / block_size) blocks: a free block is taken only
    when a position with p % block_size == 0 needs one. Which free block is yours to
    choose; two live sequences never share one. When the blocks an append needs are
    not free, it raises RuntimeError before writing anything (length, table, contents
    and num_free_blocks unchanged). Freed blocks are handed out again, still holding
    old keys. An id that is not live raises KeyError; ids are any hashable.

paged_attention(q, cache, seq_ids) -> (N, n_heads, d_head) in q.dtype
    q: (N, n_heads, d_head), one new query per sequence (its own k, v already
    appended); seq_ids: N live ids (one may appear twice). Query i attends over
    all T positions of seq_ids[i], no mask; head h reads KV head
    h // (n_heads // n_kv_heads); scale 1 / sqrt(d_head); accumulate in fp32.
Example
    cache = PagedKVCache(8, 4, 2, 16); cache.allocate("a"); cache.append("a", k6, v6)
    cache.block_table("a") holds 2 blocks; cache.num_free_blocks() == 6.
Forbidden
    F.scaled_dot_product_attention and the rest of `attention`'s set.
"""

import math

import torch


class PagedKVCache:
    def __init__(self, num_blocks, block_size, n_kv_heads, d_head, dtype=torch.float32):
        # Things to think about:
        # - What does each sequence need to remember, if its keys live only in the pools?
        # - Which data structure hands out a free block and takes it back cheaply?
        raise NotImplementedError("write PagedKVCache.__init__")

    def allocate(self, seq_id):
        raise NotImplementedError("write allocate")

    def append(self, seq_id, k, v):
        # - How many new blocks does an append of T_new positions need, starting at length T?
        # - What must be true before you write the first position, if the pool may run out?
        raise NotImplementedError("write append")

    def free(self, seq_id):
        raise NotImplementedError("write free")

    def gather(self, seq_id):
        # - The last block is part full: which of its slots belong to this sequence?
        raise NotImplementedError("write gather")

    def block_table(self, seq_id):
        raise NotImplementedError("write block_table")

    def num_free_blocks(self):
        raise NotImplementedError("write num_free_blocks")


def paged_attention(q, cache, seq_ids):
    """(N, n_heads, d_head): query i over the positions of seq_ids[i], read through its block table."""
    # - With n_heads = g * n_kv_heads, which KV head does query head h share?
    # - A reused block still holds someone else's keys past your length: are you reading them?
    raise NotImplementedError("write paged_attention")
