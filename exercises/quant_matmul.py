"""Exercise `quant_matmul`: int8 codes with a scale per row, and the matmul that multiplies them.

Grade it with `drill check quant_matmul.py`. `quantize_rowwise` and
`int8_matmul` are graded; you may add helpers in this file.

Contract
--------
quantize_rowwise(x) -> (x_q, scale)
    x: (M, K) fp32, fp16 or bf16. Symmetric int8, one scale per row, all
    arithmetic in fp32: amax = max over the row of |x.float()|;
    scale = amax / 127, or 1.0 where amax == 0 (a row of zeros);
    x_q = clamp(round(x.float() / scale), -127, 127) as int8, rounded half to
    even (torch.round). Returns x_q (M, K) int8 and scale (M,) fp32, both
    compared bit for bit. -128 never appears.
int8_matmul(a_q, a_s, b_q, b_s) -> (M, N) fp32
    a_q (M, K) int8 with a_s (M,) fp32: activations, a scale per token.
    b_q (N, K) int8 with b_s (N,) fp32: a weight in nn.Linear's (out, in)
    layout, a scale per output channel.
    out = acc * a_s[:, None] * b_s[None, :] where acc = a_q @ b_q.T summed
    exactly, as integers. Graded within 1e-6 (relative) of the exact
    product; with unit scales and K <= 1024 the result must be the exact
    integers.
Example
    x = [[2.5, -127.0, 0.5, 64.2], [0.0, 0.0, 0.0, 0.0]] gives scale [1.0, 1.0]
    (amax 127, and a row of zeros) and x_q = [[2, -127, 0, 64], [0, 0, 0, 0]]:
    2.5 and 0.5 round half to even.
Forbidden
    torch.quantize_per_tensor, torch.quantize_per_channel, the
    fake_quantize_* ops, torch.ao (quantization, quantized modules) and
    torch._weight_int8pack_mm: the point is the arithmetic.
    The graded tests pass with a float matmul of dequantised values, but the
    report flags it (quant_dequant_matmul; a failure under --strict).
"""

import torch


def quantize_rowwise(x):
    """(M, K) float -> (x_q (M, K) int8, scale (M,) fp32)."""
    # Things to think about:
    # - Which axis does the amax reduce over, and what shape must the scale have?
    # - What does a row of zeros divide by?
    # - How does .to(torch.int8) treat 3.7, and how does torch.round treat 2.5?
    # - Is the division done in fp32 even when x is fp16 or bf16?
    raise NotImplementedError("write quantize_rowwise")


def int8_matmul(a_q, a_s, b_q, b_s):
    """(M, K) int8 x (N, K) int8 with row scales -> (M, N) fp32."""
    # Things to think about:
    # - What dtype does a_q @ b_q.T return for int8 inputs, and how big can one dot product get?
    # - Which scale goes with the rows of the output and which with its columns?
    # - When is a float matmul of the codes exact, and when does it stop being?
    raise NotImplementedError("write int8_matmul")
