"""Byte-level BPE: training (GPT-2's scheme, with CS336 a1's tie rule) and a tokenizer.

Training works on the distinct pre-tokens of the text and their counts, never on
the text itself: a merge can only change the pre-tokens that hold the merged
pair, so the pair counts are kept up to date by taking out the old pairs of
just those pre-tokens and adding their new ones (an index pair -> the
pre-tokens that hold it, possibly stale, tells which). Choosing the pair is a
scan of the live counts for max((count, pair)); bytes compare
lexicographically, so among equal counts the greater (bytes, bytes) tuple wins.

`train_bpe_recount` is the plain algorithm (every pair counted afresh after
every merge): the tests check the incremental one against it, and the grader's
speed audit names a learner's code that is as slow as it.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

import regex

# GPT-2's pre-tokenisation pattern (the one tiktoken calls "gpt2"): contractions, letters, digits,
# other symbols (each with one optional leading space), then runs of whitespace.
PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_PAT = regex.compile(PAT)


def special_pattern(special_tokens: list[str] | None) -> re.Pattern | None:
    """A pattern finding the special tokens: leftmost match first, the longest one at a position."""
    if not special_tokens:
        return None
    ordered = sorted(set(special_tokens), key=len, reverse=True)
    return re.compile("|".join(re.escape(s) for s in ordered))


def split_special(text: str, special_tokens: list[str] | None) -> list[tuple[str, bool]]:
    """The text as (piece, is_special) in order; empty ordinary pieces left out."""
    pat = special_pattern(special_tokens)
    if pat is None:
        return [(text, False)] if text else []
    out: list[tuple[str, bool]] = []
    at = 0
    for m in pat.finditer(text):
        if m.start() > at:
            out.append((text[at:m.start()], False))
        out.append((m.group(), True))
        at = m.end()
    if at < len(text):
        out.append((text[at:], False))
    return out


def pretoken_counts(text: str, special_tokens: list[str] | None) -> Counter:
    """Distinct pre-tokens (UTF-8 bytes) of the text outside its special tokens, with their frequencies."""
    counts: Counter = Counter()
    for piece, special in split_special(text, special_tokens):
        if not special:
            counts.update(m.group().encode("utf-8") for m in _PAT.finditer(piece))
    return counts


def _check_size(vocab_size: int, special_tokens: list[str]) -> int:
    floor = 256 + len(special_tokens)
    if vocab_size < floor:
        raise ValueError(f"vocab_size must be at least 256 + len(special_tokens) = {floor}, got {vocab_size}")
    return vocab_size - floor


def _vocab(merges: list[tuple[bytes, bytes]], special_tokens: list[str]) -> dict[int, bytes]:
    vocab = {i: bytes([i]) for i in range(256)}
    for a, b in merges:
        vocab[len(vocab)] = a + b
    for s in special_tokens:
        vocab[len(vocab)] = s.encode("utf-8")
    return vocab


def _merge_word(word: list[bytes], a: bytes, b: bytes) -> list[bytes]:
    """Every (a, b) in `word` replaced by a + b, left to right, without overlap."""
    out: list[bytes] = []
    i, n = 0, len(word)
    while i < n:
        if i + 1 < n and word[i] == a and word[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def train_bpe(text: str, vocab_size: int, special_tokens: list[str]) -> tuple[dict[int, bytes],
                                                                               list[tuple[bytes, bytes]]]:
    """(vocab, merges), the layout of the contract: bytes 0..255, the merges, then the special tokens."""
    special_tokens = list(special_tokens)
    n_merges = _check_size(vocab_size, special_tokens)
    counted = pretoken_counts(text, special_tokens)
    words = [[bytes([c]) for c in w] for w in counted]
    freqs = list(counted.values())
    pairs: dict[tuple[bytes, bytes], int] = defaultdict(int)
    holders: dict[tuple[bytes, bytes], set[int]] = defaultdict(set)
    for w, (word, f) in enumerate(zip(words, freqs, strict=True)):
        for pair in zip(word, word[1:], strict=False):
            pairs[pair] += f
            holders[pair].add(w)
    merges: list[tuple[bytes, bytes]] = []
    while len(merges) < n_merges and pairs:
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        a, b = best
        for w in holders.pop(best):
            word = words[w]
            if len(word) < 2:
                continue
            new = _merge_word(word, a, b)
            if len(new) == len(word):  # a stale back-reference: the pair left this word earlier
                continue
            f = freqs[w]
            for pair in zip(word, word[1:], strict=False):
                left = pairs[pair] - f
                if left:
                    pairs[pair] = left
                else:
                    del pairs[pair]
            for pair in zip(new, new[1:], strict=False):
                pairs[pair] += f
                holders[pair].add(w)
            words[w] = new
        pairs.pop(best, None)
    return _vocab(merges, special_tokens), merges


def train_bpe_recount(text: str, vocab_size: int, special_tokens: list[str]) -> tuple[dict[int, bytes],
                                                                                       list[tuple[bytes, bytes]]]:
    """The same training with every pair counted afresh after every merge (slow; for cross-checks)."""
    special_tokens = list(special_tokens)
    n_merges = _check_size(vocab_size, special_tokens)
    counted = pretoken_counts(text, special_tokens)
    words = {tuple(bytes([c]) for c in w): f for w, f in counted.items()}
    merges: list[tuple[bytes, bytes]] = []
    while len(merges) < n_merges:
        pairs: Counter = Counter()
        for word, f in words.items():
            for i in range(len(word) - 1):
                pairs[(word[i], word[i + 1])] += f
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        merges.append(best)
        merged: Counter = Counter()
        for word, f in words.items():
            merged[tuple(_merge_word(list(word), *best))] += f
        words = dict(merged)
    return _vocab(merges, special_tokens), merges


class Tokenizer:
    """Encode by merge rank within each pre-token, special tokens whole; decode by joining bytes."""

    def __init__(self, vocab: dict[int, bytes], merges: list[tuple[bytes, bytes]],
                 special_tokens: list[str] | None = None) -> None:
        self.vocab = dict(vocab)
        self.ranks = {pair: r for r, pair in enumerate(merges)}
        self.special_tokens = list(special_tokens or [])
        for s in self.special_tokens:  # a special token the vocab lacks gets the next free id, in order
            if s.encode("utf-8") not in self.vocab.values():
                self.vocab[max(self.vocab) + 1 if self.vocab else 0] = s.encode("utf-8")
        self.ids: dict[bytes, int] = {}
        for i in sorted(self.vocab):  # the lower id where two hold the same bytes
            self.ids.setdefault(self.vocab[i], i)
        self._cache: dict[bytes, list[int]] = {}

    CACHE = True  # UncachedTokenizer: the yardstick of the encode speed report

    def _encode_pretoken(self, token: bytes) -> list[int]:
        hit = self._cache.get(token) if self.CACHE else None
        if hit is not None:
            return hit
        parts = [bytes([c]) for c in token]
        while len(parts) > 1:
            ranked = [(self.ranks.get(p, -1), p) for p in zip(parts, parts[1:], strict=False)]
            ranked = [(r, p) for r, p in ranked if r >= 0]
            if not ranked:
                break
            _, (a, b) = min(ranked)
            parts = _merge_word(parts, a, b)
        out = [self.ids[p] for p in parts]
        self._cache[token] = out
        return out

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for piece, special in split_special(text, self.special_tokens):
            if special:
                out.append(self.ids[piece.encode("utf-8")])
                continue
            for m in _PAT.finditer(piece):
                out.extend(self._encode_pretoken(m.group().encode("utf-8")))
        return out

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")


class UncachedTokenizer(Tokenizer):
    """Tokenizer without its pre-token cache: each pre-token merged by rank through the pair -> rank dict, as
    the contract words the encode speed it reports against (a cache makes repeated words free, ~7x faster on
    English-like text, and would flag every correct solution that has none)."""

    CACHE = False
