"""A paged KV cache (vLLM's PagedAttention layout) and attention read through it: the reference for `paged_kv`.

Keys and values of every sequence live in two shared pools of fixed-size
blocks, (num_blocks, block_size, n_kv_heads, d_head). Each sequence owns a
block table, its physical block ids in logical order; position p sits at
slot p % block_size of block table[p // block_size]. A block is taken from
the free list only when a position at a block boundary needs one, so a
sequence of T positions holds ceil(T / block_size) blocks, and a free hands
them all back. An append that does not fit raises before touching anything.
Attention gathers each sequence's positions with one index tensor, so slots
past the sequence's length (stale keys of a reused block) are never read.
"""

from __future__ import annotations

import math

import torch


class PagedKVCache:
    def __init__(self, num_blocks: int, block_size: int, n_kv_heads: int, d_head: int,
                 dtype: torch.dtype = torch.float32) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size
        self.k_pool = torch.zeros(num_blocks, block_size, n_kv_heads, d_head, dtype=dtype)
        self.v_pool = torch.zeros_like(self.k_pool)
        self._free = list(range(num_blocks - 1, -1, -1))  # a stack: pop() hands out block 0 first
        self._tables: dict = {}
        self._lengths: dict = {}

    def allocate(self, seq_id) -> None:
        if seq_id in self._tables:
            raise ValueError(f"sequence {seq_id!r} is already allocated")
        self._tables[seq_id] = []
        self._lengths[seq_id] = 0

    def _live(self, seq_id) -> list[int]:
        if seq_id not in self._tables:
            raise KeyError(seq_id)
        return self._tables[seq_id]

    def append(self, seq_id, k: torch.Tensor, v: torch.Tensor) -> None:
        table = self._live(seq_id)
        start, n = self._lengths[seq_id], k.shape[0]
        need = math.ceil((start + n) / self.block_size) - len(table)
        if need > len(self._free):
            raise RuntimeError(f"out of blocks: {need} needed, {len(self._free)} free")
        for _ in range(need):
            table.append(self._free.pop())
        pos = torch.arange(start, start + n)
        blocks = torch.tensor(table, dtype=torch.long)[pos // self.block_size]
        slots = pos % self.block_size
        self.k_pool[blocks, slots] = k.to(self.k_pool.dtype)
        self.v_pool[blocks, slots] = v.to(self.v_pool.dtype)
        self._lengths[seq_id] = start + n

    def free(self, seq_id) -> None:
        table = self._live(seq_id)
        self._free.extend(reversed(table))
        del self._tables[seq_id], self._lengths[seq_id]

    def _index(self, seq_id) -> tuple[torch.Tensor, torch.Tensor]:
        table = self._live(seq_id)
        pos = torch.arange(self._lengths[seq_id])
        return torch.tensor(table, dtype=torch.long)[pos // self.block_size], pos % self.block_size

    def gather(self, seq_id) -> tuple[torch.Tensor, torch.Tensor]:
        blocks, slots = self._index(seq_id)
        return self.k_pool[blocks, slots], self.v_pool[blocks, slots]

    def block_table(self, seq_id) -> list[int]:
        return list(self._live(seq_id))

    def num_free_blocks(self) -> int:
        return len(self._free)


def paged_attention(q: torch.Tensor, cache: PagedKVCache, seq_ids) -> torch.Tensor:
    n_heads, d_head = q.shape[1], q.shape[2]
    group = n_heads // cache.k_pool.shape[2]
    out = torch.empty_like(q)
    for i, sid in enumerate(seq_ids):
        k, v = cache.gather(sid)  # (T, n_kv, d)
        k = k.float().repeat_interleave(group, dim=1)  # head h reads KV head h // group
        v = v.float().repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,thd->ht", q[i].float(), k) / math.sqrt(d_head)
        out[i] = torch.einsum("ht,thd->hd", scores.softmax(dim=-1), v).to(q.dtype)
    return out
