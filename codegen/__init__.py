"""Code generator for GPU kernels (see the codegen issue)."""
