"""Exercise `bpe`: byte-level BPE, trained as GPT-2 and CS336 a1 train it, and a tokenizer.

Grade it with `drill check bpe.py`. `train_bpe` and `Tokenizer` (its encode and
decode) are graded; you may add helpers in this file. `import regex` is allowed
here (GPT-2's pattern needs \\p{L} and \\p{N}), and so is `import re`.

Contract
--------
train_bpe(text, vocab_size, special_tokens) -> (vocab, merges)
    1. Cut the text at every special token (leftmost match first; at one
       position the longest special token). Special tokens are dropped from
       the counts and never merged; no pair spans a cut.
    2. Pre-tokenize each remaining piece with PAT; count each distinct
       pre-token (its UTF-8 bytes) with its frequency.
    3. Start from one symbol per byte. Repeat: count every adjacent pair inside
       each pre-token, times its frequency (overlaps each count: b"aaa" holds
       (b"a", b"a") twice); merge the most frequent pair, ties to the greater
       pair as a (bytes, bytes) tuple, i.e. max((count, pair)); replace it in
       every pre-token left to right without overlap (b"aaa" -> [b"aa", b"a"]).
       Stop after vocab_size - 256 - len(special_tokens) merges, or when no
       pair is left. vocab_size >= 256 + len(special_tokens).
    merges: list[tuple[bytes, bytes]] in the order made.
    vocab: dict[int, bytes]: vocab[i] = bytes([i]) for i < 256, then
    vocab[256 + j] = merges[j][0] + merges[j][1], then the special tokens'
    UTF-8 bytes in the order given. (CS336's layout, special tokens first at
    ids 0..n-1, is accepted too.)
Tokenizer(vocab, merges, special_tokens=None)
    encode(text) -> list[int]: cut at these special tokens as above, each
    occurrence its own id, whole; encode each PAT pre-token of the rest alone:
    from its bytes, repeatedly merge every occurrence (left to right) of the
    adjacent pair with the lowest rank (its index in merges) until no adjacent
    pair is in merges; map each resulting bytes to its id. A special token
    missing from vocab gets the next free id (largest id + 1, in order); where
    two ids hold the same bytes, the lower one.
    decode(ids) -> str: b"".join(vocab[i] for i in ids).decode("utf-8",
    errors="replace").
Example
    CS336's: train_bpe("low low low low low lower lower widest widest widest
    newest newest newest newest newest newest", 263, ["<|endoftext|>"]) makes
    six merges, the first (b"s", b"t"), then (b"e", b"st").
Speed
    train_bpe on ~100 KB of English-like text with vocab_size 1000 must take at
    most 5x the reference's time (which updates the pair counts only for the
    pre-tokens that hold the merged pair); past 10x it is stopped.
Forbidden
    tiktoken, tokenizers, sentencepiece, transformers (the import policy
    refuses them).
"""

import re
from collections import Counter, defaultdict

import regex

PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""  # GPT-2's


def train_bpe(text, vocab_size, special_tokens):
    """(vocab, merges) learned from `text`."""
    # Things to think about:
    # - "A" and "B" each count 3, and so do ("B", "A") and ("A", "C"): which pair does max() of what pick?
    # - How many times does (b"a", b"a") occur in b"aaaa", and what does a merge leave of it?
    # - After a merge, which pre-tokens' pair counts can have changed? Only those need recounting.
    # - "<|endoftext|>" inside "<|endoftext|><|endoftext|>": which special token matches at that position?
    raise NotImplementedError("write train_bpe")


class Tokenizer:
    def __init__(self, vocab, merges, special_tokens=None):
        raise NotImplementedError("write Tokenizer.__init__")

    def encode(self, text):
        """Token ids of `text`."""
        # - Encoding replays the merges by rank, not by how often a pair occurs in this text.
        # - Which id does a special token the vocab lacks get?
        raise NotImplementedError("write Tokenizer.encode")

    def decode(self, ids):
        """The text of `ids`; bytes that are not valid UTF-8 become U+FFFD."""
        # - Can one character's bytes be split between two tokens?
        raise NotImplementedError("write Tokenizer.decode")
