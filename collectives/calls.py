"""The public group collectives, each mirroring its ``torch.distributed`` namesake: all-gather, broadcast,
all-reduce, reduce-scatter, all-to-all and FSDP's tensor variants (algorithms; the framing, the
transport, the agreement check and the call queue come from their own modules)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist

import codec

from . import auto, framing, work
from .agreement import check_agree
from .ring import interleave, ring
from .transport import gather_buffers, global_rank

RING_MIN_NUMEL = 1 << 16     # below this, one padded all_gather of whole streams (fewer messages)


def all_gather(tensor_list, tensor, group=None, async_op=False, *, compress=True, checksum=False):
    """``tensor_list[r]`` = rank r's ``tensor``.  ``compress="auto"``: let the cost model decide."""
    def op():
        nonlocal compress
        ws = dist.get_world_size(group)
        if compress == "auto":
            compress, how = auto.agree_and_choose("all_gather", tensor, group)
            # uncompressed, the pipelined ring beats gloo's own all_gather on every link measured
            # (bench/results/collectives.md), so only small tensors go to torch's
            if how == "native" and not (ws > 1 and tensor.numel() >= RING_MIN_NUMEL):
                dist.all_gather(tensor_list, tensor, group=group)
                return
        else:
            check_agree(tensor, group, "all_gather")
        if ws > 1 and tensor.numel() >= RING_MIN_NUMEL:          # pipelined ring, compressed bytes forwarded
            flat = tensor.detach().contiguous().view(-1)
            into = [_destination(out, flat) for out in tensor_list]
            parts = _ring([flat] * ws, group, compress, checksum, reduce=False, gather=True, into=into)
            for out, dst, part in zip(tensor_list, into, parts):
                if dst is None:
                    out.view(-1).copy_(part)
            return
        for out, buf in zip(tensor_list, gather_buffers(framing.encode(tensor, compress, checksum), group)):
            framing.decode_into(buf, out, compress, checksum)
    return work.run(op, async_op)


def broadcast(tensor, src, group=None, async_op=False, *, compress=True, checksum=False):
    """Rank ``src``'s ``tensor`` into every rank's ``tensor`` (``src`` is a global rank, as in torch)."""
    def op():
        check_agree(tensor, group, "broadcast")
        me = dist.get_rank()
        payload = framing.encode(tensor, compress, checksum) if me == src else torch.empty(0, dtype=torch.uint8)
        n = torch.tensor([payload.numel()], dtype=torch.int64)
        dist.broadcast(n, src, group=group)
        if me != src:
            limit = framing.frame_limit(tensor, compress)
            if not 0 <= int(n) <= limit:
                raise ValueError(f"broadcast: rank {src} announced a {int(n)}-byte frame for {tensor.numel()} "
                                 f"values of {tensor.dtype} (at most {limit} can be right)")
            payload = torch.empty(int(n), dtype=torch.uint8)
        dist.broadcast(payload, src, group=group)
        if me != src:
            framing.decode_into(payload, tensor, compress, checksum)
    return work.run(op, async_op)


def _ring(shards, group, compress, checksum, *, reduce=True, gather=False, into=None):
    """The slice-pipelined ring of :mod:`collectives.ring` with :mod:`collectives.framing`'s frames."""
    return ring(shards, group, lambda t, out: framing.encode(t, compress, checksum, out),
                lambda buf, out: framing.decode_into(buf, out, compress, checksum), reduce=reduce, gather=gather,
                global_rank=lambda r: global_rank(r, group), into=into,
                frame_limit=(lambda t: codec.max_encoded_size(t, checksum=checksum)) if compress else None)


def _destination(out: torch.Tensor, like: torch.Tensor):
    """``out`` as a flat tensor the ring can decode into (same dtype and size as ``like``, contiguous),
    or None: the ring then writes a fresh tensor, copied into ``out`` afterwards."""
    if out.dtype != like.dtype or out.numel() != like.numel() or not out.is_contiguous():
        return None
    return out.detach().view(-1)


def reduce_scatter(output, input_list, op=dist.ReduceOp.SUM, group=None, async_op=False, *, compress=True,
                   checksum=False):
    """``output`` = sum over ranks of ``input_list[rank]`` (ring algorithm)."""
    if op != dist.ReduceOp.SUM:
        raise NotImplementedError("only ReduceOp.SUM is supported")

    def run():
        check_agree(output, group, "reduce_scatter")
        if dist.get_world_size(group) == 1:
            output.copy_(input_list[0])
            return
        shards = [t.contiguous().view(-1) for t in input_list]
        r = dist.get_rank(group)
        into = [None] * len(shards)
        into[r] = _destination(output, shards[r])
        mine = _ring(shards, group, compress, checksum, into=into)
        if into[r] is None:
            output.view(-1).copy_(mine[r])
    return work.run(run, async_op)


def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False, *, algorithm="auto", compress=True,
               checksum=False, while_computing=False):
    """In-place sum over ranks.  ``algorithm``: "ring", "gather", "auto" (gather below 64K values) or
    "native" (torch's own all_reduce, uncompressed only).  ``compress="auto"``: the cost model of
    :mod:`collectives.strategy` picks; where compression does not pay it runs the uncompressed ring
    (bit-identical to the compressed one) from 64K values, below that and beside compute "native",
    whose summation order is gloo's.  ``while_computing``: with "auto", the call overlaps compute on the same cores
    (a DDP hook), so compression is charged the CPU time it takes from that compute."""
    if op != dist.ReduceOp.SUM:
        raise NotImplementedError("only ReduceOp.SUM is supported")

    def run():
        nonlocal compress, algorithm
        ws = dist.get_world_size(group)
        if compress == "auto":
            compress, algorithm = auto.agree_and_choose("all_reduce", tensor, group, while_computing)
            # uncompressed, the pipelined ring is as fast as gloo's own all_reduce on every link measured
            # (0.98-1.08x, bench/results/collectives.md) and sums in the compressed ring's order, so a
            # tensor gives the same bits whichever way the cost model goes; beside compute (a DDP hook)
            # gloo's C++ threads leave the training thread's cores and GIL alone, so there it runs native
            if algorithm == "native" and not while_computing and tensor.numel() >= RING_MIN_NUMEL:
                algorithm = "ring"
        else:
            check_agree(tensor, group, "all_reduce")
        if ws == 1:
            return
        algo = algorithm if algorithm != "auto" else ("gather" if tensor.numel() < RING_MIN_NUMEL else "ring")
        if algo == "native":
            if compress:
                raise ValueError("algorithm='native' is torch's own all_reduce: use compress=False or 'auto'")
            t = tensor if tensor.is_contiguous() else tensor.contiguous()
            dist.all_reduce(t, group=group)
            if t is not tensor:
                tensor.copy_(t)
            return
        flat = tensor.detach().contiguous().view(-1)
        if algo == "gather":
            parts = [torch.empty_like(flat) for _ in range(ws)]
            for out, buf in zip(parts, gather_buffers(framing.encode(flat, compress, checksum), group)):
                framing.decode_into(buf, out, compress, checksum)
            acc = parts[0].clone()
            for p in parts[1:]:
                acc = acc + p
        elif algo == "ring":
            # rank j's shard: pieces j, j + ws, ... of the tensor (ring.interleave: the shards code to
            # about the same size however unevenly the tensor compresses along its length)
            q = interleave(flat.numel(), flat.element_size(), ws)
            pieces = torch.tensor_split(flat, ws * q)
            shards = [list(pieces[j::ws]) for j in range(ws)]
            if flat.data_ptr() == tensor.data_ptr() and tensor.is_contiguous():    # results land in place
                _ring(shards, group, compress, checksum, gather=True, into=shards)
                return
            acc = torch.empty_like(flat)
            out = torch.tensor_split(acc, ws * q)
            _ring(shards, group, compress, checksum, gather=True, into=[list(out[j::ws]) for j in range(ws)])
        else:
            raise ValueError(f"unknown algorithm {algorithm!r}: ring, gather, native or auto")
        tensor.view(-1).copy_(acc)
    return work.run(run, async_op, [tensor])


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None,
                      async_op=False, *, compress=True, checksum=False):
    """Rank r sends ``input``'s i-th split (dim 0) to rank i and receives rank i's r-th split."""
    def run():
        ws = dist.get_world_size(group)
        r = dist.get_rank(group)
        ins = list(torch.split(input, input_split_sizes or [input.shape[0] // ws] * ws))
        outs = list(torch.split(output, output_split_sizes or [output.shape[0] // ws] * ws))
        outs[r].copy_(ins[r])
        # every part is encoded ahead on one thread and decoded behind on another; each part goes out as
        # soon as it is coded, to all peers at once (size, then frame), and each frame is taken in as soon
        # as its size is known, so all links and both coding threads work together
        peers = [(r + step) % ws for step in range(1, ws)]
        srcs = [(r - step) % ws for step in range(1, ws)]
        with ThreadPoolExecutor(1, thread_name_prefix="zipccl-a2a-encode") as enc, \
                ThreadPoolExecutor(1, thread_name_prefix="zipccl-a2a-decode") as dec:
            frames = [enc.submit(framing.encode, ins[to], compress, checksum) for to in peers]
            sizes = {frm: torch.empty(1, dtype=torch.int64) for frm in srcs}
            size_reqs = {frm: dist.irecv(sizes[frm], global_rank(frm, group), group=group) for frm in srcs}
            sends = []
            for to, fut in zip(peers, frames):
                frame = fut.result()
                n = torch.tensor([frame.numel()], dtype=torch.int64)
                sends += [dist.isend(n, global_rank(to, group), group=group),
                          dist.isend(frame, global_rank(to, group), group=group)]
            pending = []
            for frm in srcs:
                size_reqs[frm].wait()
                n = int(sizes[frm])
                limit = framing.frame_limit(outs[frm], compress) if outs[frm].numel() else (1 << 16)
                if not 0 <= n <= limit:
                    raise ValueError(f"all_to_all_single: rank {frm} announced a {n}-byte frame for "
                                     f"{outs[frm].numel()} values")
                buf = torch.empty(n, dtype=torch.uint8)
                dist.irecv(buf, global_rank(frm, group), group=group).wait()
                if outs[frm].numel():
                    pending.append(dec.submit(framing.decode_into, buf, outs[frm], compress, checksum))
                elif buf.numel() and compress:
                    pending.append(dec.submit(codec.decode, buf))     # still validate what arrived
            for q in sends:
                q.wait()
            for f in pending:
                f.result()
    return work.run(run, async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False, *, compress=True,
                           checksum=False):
    """FSDP's all-gather: ``output_tensor`` (world_size * n values, flat or stacked) = every rank's
    ``input_tensor`` (n values) concatenated in rank order."""
    ws = dist.get_world_size(group)
    if output_tensor.numel() != ws * input_tensor.numel():
        raise ValueError(f"all_gather_into_tensor: output has {output_tensor.numel()} values, expected "
                         f"{ws} x {input_tensor.numel()}")
    parts = list(output_tensor.view(-1).chunk(ws)) if input_tensor.numel() else [
        output_tensor.view(-1)[:0] for _ in range(ws)]
    return all_gather(parts, input_tensor.reshape(-1), group, async_op, compress=compress, checksum=checksum)


def reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False, *, compress=True,
                          checksum=False):
    """FSDP's reduce-scatter: ``input`` (world_size * n values) summed over ranks; rank r keeps slice r."""
    ws = dist.get_world_size(group)
    if input.numel() != ws * output.numel():
        raise ValueError(f"reduce_scatter_tensor: input has {input.numel()} values, expected {ws} x {output.numel()}")
    return reduce_scatter(output.view(-1), list(input.reshape(-1).chunk(ws)) if output.numel() else
                          [input.reshape(-1)[:0]] * ws, op, group, async_op, compress=compress, checksum=checksum)
