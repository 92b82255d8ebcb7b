"""Where a checkpoint holds each element of each parameter, whatever the
sharding that wrote it, so that it loads into any other: one process, W'
ZeRO ranks (mlpo's own data parallel) or W' FSDP ranks.

A checkpoint's manifest (optimizer/checkpoint_reader.h) gives every group
one coordinate space that CheckpointReader.read(g, start, n) reads:
- one process or ZeRO ranks: the group's parameters concatenated in order
  (rank r holds the r-th chunk); parameter i is elements
  [offset_i, offset_i + numel_i);
- FSDP ("sharding": "fsdp"): rank-major, each rank's local shards
  concatenated in parameter order, rank 0's first. fully_shard gives rank
  r torch.chunk's r-th piece of every parameter's dim-0 rows, so every
  rank's piece and place follow from the shapes and the world size.
Within a parameter, elements are counted in row-major order (the order
of its dim-0 rows, which FSDP's pieces keep). fsdp_mesh and local_shard
tell the optimizer whether and how its parameters are FSDP's.
"""
import math

import numpy as np


def fsdp_mesh(groups):
    """The device mesh when the parameters are FSDP's DTensor shards (one
    1-d mesh, each sharded on dim 0, as fully_shard makes them), else None;
    ValueError for any other mix or layout."""
    try:
        from torch.distributed.tensor import DTensor, Shard
    except ImportError:  # a torch built without distributed
        return None
    params = [p for g in groups for p in g["params"]]
    dts = [p for p in params if isinstance(p, DTensor)]
    if not dts:
        return None
    if len(dts) != len(params):
        raise ValueError(
            f"mlpo.torch: {len(dts)} of the {len(params)} parameters are "
            "DTensors (FSDP's fully_shard) and the others plain tensors; "
            "shard the whole model (fully_shard on the root module too), "
            "so that every parameter is one rank's shard")
    meshes = {p.device_mesh for p in dts}
    if len(meshes) != 1:
        raise ValueError("mlpo.torch: the parameters are DTensors on "
                         f"{len(meshes)} device meshes; mlpo takes one")
    mesh = meshes.pop()
    if mesh.ndim != 1 or any(tuple(p.placements) != (Shard(0),)
                             for p in dts):
        raise ValueError(
            "mlpo.torch: DTensor parameters are supported as fully_shard "
            "makes them (a 1-d mesh, each sharded on dim 0), not "
            f"{dts[0].placements} on a {mesh.ndim}-d mesh")
    return mesh


def local_shard(p):
    """A parameter's memory on this rank: its local shard for a DTensor."""
    return p._local_tensor if hasattr(p, "_local_tensor") else p


def row_numel(shape):
    """Elements in one dim-0 row of a tensor of `shape` (1 for a 0-d or
    1-d one)."""
    return math.prod(shape[1:]) if len(shape) > 1 else 1


def fsdp_rows(shape, world, rank):
    """[first, end) of the dim-0 rows fully_shard gives `rank` of `world`:
    torch.chunk's pieces of ceil(rows / world) rows (the last ones smaller
    or empty)."""
    rows = shape[0] if len(shape) else 1
    chunk = -(-rows // world)
    first = min(rows, rank * chunk)
    return first, min(rows, first + chunk)


def fsdp_group_sizes(shapes, world):
    """Elements each rank holds of a group of parameters of `shapes`."""
    out = []
    for r in range(world):
        n = 0
        for s in shapes:
            a, b = fsdp_rows(s, world, r)
            n += (b - a) * row_numel(s)
        out.append(n)
    return out


class CheckpointCoords:
    """Where each element of each manifest parameter lies in its group's
    coordinates. runs(i, ja, jb): (coordinate, count, at) for elements
    [ja, jb) of parameter i, `at` counted from ja."""

    def __init__(self, manifest):
        params = manifest["params"]
        world = manifest["world"]
        self.pieces = {}  # i -> [(first element, end element, coordinate)]
        if manifest.get("sharding") != "fsdp":
            for i, pm in enumerate(params):
                self.pieces[i] = [(0, pm["numel"], pm["offset"])]
            return
        base = {}
        for r in range(world):
            for i, pm in enumerate(params):
                g = pm["group"]
                q = row_numel(pm["shape"])
                a, b = fsdp_rows(pm["shape"], world, r)
                at = base.get(g, 0)
                self.pieces.setdefault(i, []).append((a * q, b * q, at))
                base[g] = at + (b - a) * q

    def runs(self, i, ja, jb):
        for a, b, coord in self.pieces[i]:
            lo, hi = max(a, ja), min(b, jb)
            if lo < hi:
                yield coord + (lo - a), hi - lo, lo - ja


def fill_from(reader, coords, pieces):
    """A fill(g, off, n) for Engine.import_state: this rank's state
    elements [off, off + n) of group g read from a checkpoint. `pieces` is
    the optimizer's _shard_pieces(g) as a list: (entry, start in the
    parameter's memory, count, offset in the shard); an entry's "elem0"
    is its first element's number in the whole parameter (FSDP)."""
    def fill(g, off, n):
        out = [np.empty(n, dtype=np.float32)
               for _ in range(1 + len(reader.slots))]
        covered = 0
        for e, at, cnt, o in pieces[g]:
            a, b = max(off, o), min(off + n, o + cnt)
            if a >= b:
                continue
            ja = e.get("elem0", 0) + at + (a - o)
            for coord, k, d in coords.runs(e["index"], ja, ja + (b - a)):
                got_p, got = reader.read(g, coord, k)
                dst = a - off + d
                out[0][dst:dst + k] = got_p
                for x, (sec, _, _) in zip(out[1:], reader.slots):
                    x[dst:dst + k] = got[sec]
                covered += k
        if covered != n:
            raise ValueError(
                f"mlpo.torch: the checkpoint holds {covered} of elements "
                f"[{off}, +{n}) of group {g} (its manifest does not cover "
                "this model)")
        return out[0], {sec: x for (sec, _, _), x in zip(reader.slots,
                                                         out[1:])}
    return fill
