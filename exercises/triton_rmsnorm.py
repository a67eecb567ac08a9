"""Exercise `triton_rmsnorm`: RMSNorm as a Triton kernel (`@triton.jit`) and the launcher that calls it.

Grade it with `drill check triton_rmsnorm.py` on a machine with a CUDA GPU
(and the `triton` package): it is graded on CUDA only. Only `rms_norm` is
graded; the kernel is yours to design. Without a GPU, DRILL_TRITON_INTERPRET=1
grades the values on the CPU through Triton's interpreter (slow, no bandwidth).

Contract
--------
Call
    rms_norm(x, weight, eps=1e-6) -> y, with y = x / sqrt(mean(x**2) + eps) * weight
    over the last dimension, computed by a kernel you write with @triton.jit
    and launch from rms_norm (the grader counts the launches).
Shapes
    x: (..., n_cols) with any number of leading dims (1-D included) and any
    width n_cols >= 1, powers of two or not, up to ~16k; weight: (n_cols,),
    contiguous, same dtype as x. y has x's shape and dtype (a new tensor,
    contiguous), on x's device.
Layouts
    x may be non-contiguous, and must be HANDLED (not refused): a column
    slice x[:, :d] of a wider tensor (row stride > n_cols), every other row
    x[::2], a transposed tensor (column stride != 1). Pass the strides to the
    kernel, or make the rows contiguous in the launcher (a copy costs one
    more read and write of x).
Dtypes
    fp32, fp16, bf16. Accumulate in fp32 inside the kernel, whatever x's
    dtype (tl.load gives the input dtype: squares of fp16 values above ~256
    overflow), and store in y's dtype.
Default
    eps defaults to 1e-6.
Gradients
    Not graded: a forward kernel only.
Bandwidth
    Graded separately on 16384 x 4096 bf16 rows, timed with CUDA events next
    to a device-to-device copy of the same bytes: reported always, and a
    failure under --strict below 55% of the copy's bandwidth (about half the
    datasheet peak; a fused Triton RMSNorm reaches 80-90%).
Allowed
    `import triton` and `import triton.language as tl` (this exercise only),
    torch for the launcher (torch.empty, reshape, strides).
Forbidden
    F.rms_norm, nn.RMSNorm, F.layer_norm, nn.LayerNorm; triton.runtime,
    triton.knobs and Triton's other internals.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    """One program per row is a good start: load the row (masked past n_cols), sum the squares in fp32,
    scale by rsqrt(mean + eps) and the weight, store. Add the strides you need as arguments."""
    # Things to think about:
    # - tl.arange needs a power of two: BLOCK >= n_cols, and a mask for the lanes past the row's end.
    #   What do the masked lanes load, and what do you divide the sum by?
    # - Where does the row start in memory when x is a slice or a transpose?
    # - In which dtype do you square and sum? What dtype does tl.store write?
    pass


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Flatten the leading dims, allocate y, launch one program per row, return y in x's shape."""
    # Things to think about:
    # - x.reshape(-1, n_cols) is a view when it can be: its strides may not be (n_cols, 1).
    # - triton.next_power_of_2(n_cols) for BLOCK; num_warps grows with BLOCK.
    raise NotImplementedError("write rms_norm (and its kernel)")
