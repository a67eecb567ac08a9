"""The reference model: ground truth for the grader (fused kernels + math path)."""
