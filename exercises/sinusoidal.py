"""Exercise `sinusoidal`: fixed sinusoidal position encodings, from scratch.

Grade it with `drill check sinusoidal.py`. Only `sinusoidal_positions` (and
the optional `LAYOUT` constant) are graded; you may add helpers in this file.

Contract
--------
Shapes
    positions: (T,) int64 holding the *absolute* position of each token. They
    are not necessarily 0..T-1: an offset, gaps, any order and values in the
    tens of thousands are all legal. d_model is even. Returns (T, d_model) fp32.
Frequencies
    w_i = base ** (-2i / d_model) for i = 0 .. d_model/2 - 1, and the token at
    position p has the angles p * w_i. Use the `base` argument.
Layout (which column holds what)
    "interleaved"  sin(p w_i) at column 2i, cos(p w_i) at column 2i + 1
                   (Vaswani et al.; Hugging Face's DistilBERT)
    "concat"       sin(p w_i) at column i, cos(p w_i) at column d_model/2 + i
                   (tensor2tensor's layout; Hugging Face's Marian)
    Declare the one you implement in the module-level LAYOUT constant (absent
    means "interleaved"). The grader checks your output against the layout
    you declare; any other value is refused.
Dtypes
    Compute the angles in fp32 or better: at position 10000 a half-precision
    angle is off by whole radians. Return fp32.
Gradients
    None: the encodings depend on integers only.
"""

import torch

# Which layout you implement. Change to "concat" if sin fills the first half
# of the columns and cos the second; leave "interleaved" (or delete the line)
# for sin/cos alternating.
LAYOUT = "interleaved"


def sinusoidal_positions(positions, d_model, base=10000.0):
    """positions: (T,) int64 absolute positions; d_model even. Returns (T, d_model) fp32."""
    # Things to think about:
    # - How many distinct frequencies are there, and is the exponent 2i/d_model
    #   or i/d_model when i counts them? Do the sin and the cos of a pair share one?
    # - Angles come from `positions`, not from torch.arange(T).
    # - In which dtype do you multiply position by frequency?
    # - (T, 1) times (1, d_model/2) gives every angle at once.
    # - Which columns get sin and which cos must agree with LAYOUT above:
    #   torch.stack(..., dim=-1) then flatten, or torch.cat?
    raise NotImplementedError("write sinusoidal_positions")
