"""Point-to-point: pipelined :func:`send` / :func:`recv` of a tensor in slices, with UCCL-Zip's split-send
(a slice's low mantissa bits go on the wire while the rest is being coded)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist

from codec.layouts import packed_nbytes
from codec.planes import low_width, worth_splitting

from . import framing, work

PIPELINE_SLICE_BYTES = 8 << 20     # send/recv pipeline: encode slice i+1 while slice i is on the wire


def send(tensor, dst, group=None, *, compress=True, checksum=False, slice_bytes: int = PIPELINE_SLICE_BYTES,
         split: bool = True):
    """Point-to-point send (blocking), pipelined: the tensor goes in slices of ``slice_bytes``; the
    next slice is encoded (GIL released) while the previous one is being sent, and the receiver
    decodes slice i while slice i+1 arrives.  The receiver calls :func:`recv` with a same-shape tensor.

    ``split=True`` (with compression; UCCL-Zip's split-send): each slice's low mantissa bits, which
    no entropy coder can shrink, go on the wire at once as a packed plane (:mod:`codec.planes`)
    while the rest of the slice (sign, exponent, leading mantissa bit) is being coded; the coded
    part follows.  Same bytes in total as coding the whole slice, but the wire starts right away.
    Used where it costs no ratio (:func:`codec.planes.worth_splitting`: not for float8, not for
    tensors with many zeros); otherwise whole slices are coded."""
    def op():
        flat = tensor.detach().contiguous().view(-1)
        n_slices = max(1, -(-flat.numel() * flat.element_size() // slice_bytes))
        parts = torch.tensor_split(flat, n_slices)
        use_split = bool(compress and split and flat.numel() and worth_splitting(framing.as_numpy(parts[0])))
        dist.send(torch.tensor([n_slices, int(use_split)], dtype=torch.int64), dst, group=group)
        with ThreadPoolExecutor(1, thread_name_prefix="zipccl-encode") as pool:
            def prepare(part):
                """(low-bit plane or None, future of the coded frame) of one slice."""
                if use_split:
                    low, head = framing.split_encode(part)
                    return low, pool.submit(framing.encode_head, head, checksum)
                return None, pool.submit(framing.encode, part, compress, checksum)

            low, fut = prepare(parts[0])
            for i in range(n_slices):
                if low is not None:
                    dist.send(low, dst, group=group)                 # while the head is being coded
                nxt = prepare(parts[i + 1]) if i + 1 < n_slices else None
                payload = fut.result()
                dist.send(torch.tensor([payload.numel()], dtype=torch.int64), dst, group=group)
                dist.send(payload, dst, group=group)
                if nxt is not None:
                    low, fut = nxt
    work.run(op, False)


def recv(tensor, src, group=None, *, compress=True, checksum=False):
    """Receive what :func:`send` sent (split or not) into ``tensor``; returns ``src``."""
    def op():
        flat = tensor.view(-1)
        hdr = torch.empty(2, dtype=torch.int64)
        dist.recv(hdr, src, group=group)
        n_slices, use_split = int(hdr[0]), int(hdr[1])
        if not 1 <= n_slices <= max(1, flat.numel()) or use_split not in (0, 1) or (use_split and not compress):
            raise ValueError(f"recv: sender announced {n_slices} slices (split={use_split}) for {flat.numel()} "
                             f"values (compress={compress})")
        parts = torch.tensor_split(flat, n_slices)
        n = torch.empty(1, dtype=torch.int64)
        with ThreadPoolExecutor(1, thread_name_prefix="zipccl-decode") as pool:
            pending = []
            for part in parts:
                low = None
                if use_split:
                    low = torch.empty(packed_nbytes(part.numel(), low_width(part.dtype)), dtype=torch.uint8)
                    dist.recv(low, src, group=group)
                dist.recv(n, src, group=group)
                limit = framing.frame_limit(part, compress)
                if not 0 <= int(n) <= limit:
                    raise ValueError(f"recv: sender announced a {int(n)}-byte frame for {part.numel()} values")
                payload = torch.empty(int(n), dtype=torch.uint8)
                dist.recv(payload, src, group=group)
                if use_split:
                    pending.append(pool.submit(framing.join_into, low, payload, part, checksum))
                else:
                    pending.append(pool.submit(framing.decode_into, payload, part, compress, checksum))
            for f in pending:
                f.result()
    work.run(op, False)
    return src
