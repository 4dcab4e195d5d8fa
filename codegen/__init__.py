"""Generated GPU kernels: Triton and CUDA rANS decoders specialised per dtype and arch.

``codegen.generate`` renders ``codegen/templates`` (constants only) into a versioned cache;
``python -m codegen --all`` regenerates every target, ``--list`` shows them.  The Triton decoder
backs ``codec.decode(buf, backend="triton")`` (GPU, or the CPU interpreter with
``TRITON_INTERPRET=1``); the CUDA decoder is compiled with NVRTC (``generate.compile_cuda``).
GPU encoders are not generated yet: ``backend="triton"`` encodes with the numba backend,
which writes the same bytes.
"""
