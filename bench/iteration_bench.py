"""The iteration benchmark: a GPT-shaped model whose optimizer state does
not fit the DRAM tier (about 100M parameters, tier 25% of the state)
trains a few iterations three ways, interleaved iteration by iteration so
that the disk's drift falls on all of them alike:

  overlap   write-behind and read-ahead on, update_in_backward=False: a
            step returns once the parameters hold their new values, its
            last commits land during the next forward and backward, and
            the next step's first reads start as it returns
  in-backward  mlpo.torch.AdamW as it comes: the same with the update
            during backward (each subgroup updated during backward once
            its gradients are final)
  no-overlap  write_behind = false, read_ahead = false: every byte of the
            update inside step()
  torch     torch.optim.AdamW with its state in RAM

and prints, from that one run: each one's iteration time (forward+backward
plus step), forward+backward time, step time; the update's I/O time (the
no-overlap step, which is all I/O and kernel); and the ratios the issue
asks for (overlap against torch, and against max(forward+backward,
update)). Also the bytes each store path moved a step.

    .venv/bin/python bench/iteration_bench.py [--layers 12 --d-model 768]
        [--iters 5] [--cache 25%] [--dir var/bench-iter] [--clip N|auto]
        [--accumulation N] [--user-clip] [--trainer] [--json]

--trainer runs Hugging Face Trainer's defaults: 4 micro-batches an
iteration and clip_grad_norm_(1.0) after backward in every mode.

--ddp N runs it on N gloo ranks of this machine (it starts them itself,
one thread of the CPU's each): every model wrapped in
DistributedDataParallel, each rank with batches of its own; torch.optim
keeps the whole state on every rank, mlpo a shard of it per rank with
DDP's communication hook (mlpo.torch.ddp_comm_hook, so in-backward
updates from the averaged buckets); rank 0's times are printed.

--fsdp N the same under FSDP (torch's fully_shard on every transformer
block and the root): torch.optim updates each rank's shards of the
parameters with their state in RAM, mlpo each rank's shards with their
state in its store (in-backward: each gradient shard as FSDP's
reduce-scatter puts it in place).
"""
import argparse
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    sys.exit(f"iteration_bench: needs PyTorch ({e}); run it with mlpo's "
             "venv (.venv/bin/python)")
try:
    import mlpo.torch
except ImportError as e:
    sys.exit(f"iteration_bench: cannot import mlpo ({e}); build it "
             "(scripts/build.sh) and run with PYTHONPATH=build/python")


KINDS = ("overlap", "in-backward", "no-overlap", "torch")


class GPT(nn.Module):
    def __init__(self, vocab, ctx, d, layers, heads):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0,
                                       batch_first=True, norm_first=True)
            for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(ctx))

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        for b in self.blocks:
            h = b(h, src_mask=self.mask[:x.shape[1], :x.shape[1]],
                  is_causal=True)
        return self.head(self.ln(h))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5,
                    help="timed iterations of each (after one untimed)")
    ap.add_argument("--cache", default="25%",
                    help="the DRAM tier: a share of the state or a size")
    ap.add_argument("--dir", default=os.path.join(
                        "/var/tmp", f"mlpo-bench-iter-{os.getuid()}"),
                    help="where the two store paths go (nvme/, pfs/); "
                         "removed at the end unless --keep (default "
                         "%(default)s: outside the checkout)")
    ap.add_argument("--keep", action="store_true",
                    help="leave the stores in --dir for mlpo inspect")
    ap.add_argument("--commits", type=int, default=2,
                    help="mlpo's commits in flight (a write-behind step "
                         "leaves up to this many behind)")
    ap.add_argument("--prefetch", type=int, default=2,
                    help="mlpo's checkouts in flight ahead")
    ap.add_argument("--subgroup", type=int, default=1 << 22,
                    help="elements per subgroup")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads (0: every core)")
    ap.add_argument("--clip", default=None,
                    help="clip the gradients' global norm at this value "
                         "(mlpo: max_grad_norm; torch: clip_grad_norm_ "
                         "after backward), or 'auto': 90%% of the norm of a "
                         "probe batch, so that some steps clip and some "
                         "do not. The update in backward then runs "
                         "speculatively and redoes the steps that clip: "
                         "the redo rate is printed")
    ap.add_argument("--accumulation", type=int, default=1,
                    help="micro-batches (backwards) per iteration; the "
                         "update in backward learns the count (default 1)")
    ap.add_argument("--user-clip", action="store_true",
                    help="clip as Trainer and Accelerate do: "
                         "clip_grad_norm_ after backward in every mode "
                         "(mlpo's max_grad_norm off), so the update in "
                         "backward compares the rewritten gradients")
    ap.add_argument("--trainer", action="store_true",
                    help="Hugging Face Trainer's defaults: --accumulation 4 "
                         "--user-clip --clip 1.0 (each unless given)")
    ap.add_argument("--ddp", type=int, default=1,
                    help="ranks of DistributedDataParallel (gloo), started "
                    "here (default 1: one process, no DDP)")
    ap.add_argument("--fsdp", type=int, default=1,
                    help="ranks of FSDP (fully_shard, gloo), started here "
                    "(default 1: one process, no FSDP)")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON object")
    a = ap.parse_args(argv)
    if a.trainer:
        a.user_clip = True
        if a.accumulation == 1:
            a.accumulation = 4
        if a.clip is None:
            a.clip = "1.0"
    if a.ddp < 1 or a.fsdp < 1:
        ap.error("--ddp and --fsdp must be 1 or more")
    if a.ddp > 1 and a.fsdp > 1:
        ap.error("--ddp and --fsdp: one of them")
    a.ranks = max(a.ddp, a.fsdp)
    if a.accumulation < 1:
        ap.error("--accumulation must be 1 or more")
    if a.user_clip and a.clip is None:
        ap.error("--user-clip needs --clip")
    if a.clip not in (None, "auto"):
        try:
            a.clip = float(a.clip)
        except ValueError:
            ap.error(f"--clip {a.clip!r}: a number or 'auto'")
        if not a.clip > 0 or math.isinf(a.clip):
            ap.error("--clip must be a positive finite number or 'auto'")
    for k in ("layers", "d_model", "heads", "vocab", "ctx", "batch", "iters",
              "commits", "prefetch", "subgroup"):
        if getattr(a, k) < 1:
            ap.error(f"--{k.replace('_', '-')} must be at least 1")
    if a.d_model % a.heads:
        ap.error("--d-model must be a multiple of --heads")
    return a


def launch_ranks(a, argv):
    """--ddp N or --fsdp N: this script again on N ranks (gloo on localhost); rank 0's
    output is this run's; the exit status the worst rank's."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    procs, logs = [], []
    for r in range(a.ranks):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r),
                   WORLD_SIZE=str(a.ranks), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, GLOO_SOCKET_IFNAME="lo",
                   OMP_NUM_THREADS=str(a.threads or 1))
        # (the other ranks' errors into a file, not a pipe: a pipe read only
        # after the rank ends would stall it once full)
        logs.append(None if r == 0 else tempfile.TemporaryFile("w+"))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)] + list(argv), env=env,
            stdout=None if r == 0 else subprocess.DEVNULL,
            stderr=logs[-1], text=True))
    codes = [p.wait() for p in procs]
    for r in range(1, a.ranks):
        if codes[r]:
            logs[r].seek(0)
            sys.stderr.write(f"iteration_bench: rank {r} failed:\n"
                             + logs[r].read()[-3000:])
    sys.exit(max(codes))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    # A scheduler's stop (SIGTERM) unwinds like ^C, so that the stores
    # are removed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        run(a, argv)
    finally:
        # Rank 0 (or the launcher) removes the stores, also after an error
        # or ^C: gigabytes each at the default size.
        if not a.keep and os.environ.get("RANK", "0") == "0":
            shutil.rmtree(a.dir, ignore_errors=True)


def run(a, argv):
    if a.ranks > 1 and "RANK" not in os.environ:
        launch_ranks(a, argv)
    rank = 0
    if a.ranks > 1:
        torch.distributed.init_process_group("gloo")
        rank = torch.distributed.get_rank()
        torch.set_num_threads(a.threads or 1)
    if a.threads:
        torch.set_num_threads(a.threads)
    parent = os.path.dirname(os.path.abspath(a.dir))
    if not os.path.isdir(parent):
        sys.exit(f"iteration_bench: --dir {a.dir}: {parent} does not exist")
    if rank == 0:
        shutil.rmtree(a.dir, ignore_errors=True)
    if a.ranks > 1:
        torch.distributed.barrier()
    runs = {}
    torch.manual_seed(0)
    base = GPT(a.vocab, a.ctx, a.d_model, a.layers, a.heads)
    nparams = sum(p.numel() for p in base.parameters())
    if a.clip == "auto":
        pg = torch.Generator().manual_seed(2)
        x = torch.randint(0, a.vocab, (a.batch, a.ctx), generator=pg)
        y = torch.randint(0, a.vocab, (a.batch, a.ctx), generator=pg)
        F.cross_entropy(base(x).view(-1, a.vocab), y.view(-1)).backward()
        # 90% of it: the first steps clip, and the later ones, as the
        # gradient norm falls in training, do not (the probe's norm itself
        # clipped none of five steps).
        a.clip = 0.9 * float(torch.nn.utils.clip_grad_norm_(
            base.parameters(), float("inf")))
        base.zero_grad(set_to_none=True)
    clip = a.clip or 0.0
    for kind in KINDS:
        m = GPT(a.vocab, a.ctx, a.d_model, a.layers, a.heads)
        m.load_state_dict(base.state_dict())
        net = m
        if a.ddp > 1:
            m = torch.nn.parallel.DistributedDataParallel(net)
        elif a.fsdp > 1:
            from torch.distributed.fsdp import fully_shard
            for b in net.blocks:
                fully_shard(b)
            fully_shard(net)
        if kind == "torch":
            opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        else:
            paths = [os.path.join(a.dir, kind, t) for t in ("nvme", "pfs")]
            for p in paths:
                os.makedirs(p, exist_ok=True)
            store = {"path": [{"root": paths[0], "kind": "nvme"},
                              {"root": paths[1], "kind": "pfs"}],
                     "cache": a.cache,
                     "write_behind": kind != "no-overlap",
                     "read_ahead": kind != "no-overlap"}
            opt = mlpo.torch.AdamW(net.parameters(), lr=1e-4, store=store,
                                   subgroup_numel=a.subgroup,
                                   commits=a.commits, prefetch=a.prefetch,
                                   update_in_backward=kind == "in-backward",
                                   max_grad_norm=0.0 if a.user_clip
                                   else clip)
            if a.ddp > 1:
                m.register_comm_hook(opt, mlpo.torch.ddp_comm_hook)
        runs[kind] = dict(model=m, opt=opt, fb=[], step=[], io={}, redone=0,
                          clipped=0, redo_s=[])
    g = torch.Generator().manual_seed(1 + rank)
    if rank:  # (rank 0 prints)
        sys.stderr = open(os.devnull, "w")
        a.json = True
    print(f"iteration_bench: {nparams / 1e6:.1f}M parameters, "
          f"{a.batch}x{a.ctx} tokens an iteration, DRAM tier {a.cache} of "
          f"{12 * nparams / 2**30:.2f} GiB of state; {a.iters} timed "
          "iterations each, interleaved" + (
              f"; DDP on {a.ddp} gloo ranks" if a.ddp > 1 else
              f"; FSDP on {a.fsdp} gloo ranks" if a.fsdp > 1 else ""),
          file=sys.stderr)
    for it in range(a.iters + 1):
        xs = [(torch.randint(0, a.vocab, (a.batch, a.ctx), generator=g),
               torch.randint(0, a.vocab, (a.batch, a.ctx), generator=g))
              for _ in range(a.accumulation)]
        order = list(runs)
        order = order[it % len(order):] + order[:it % len(order)]
        for kind in order:
            r = runs[kind]
            t0 = time.perf_counter()
            r["opt"].zero_grad(set_to_none=True)
            for x, y in xs:
                loss = F.cross_entropy(r["model"](x).view(-1, a.vocab),
                                       y.view(-1)) / a.accumulation
                loss.backward()
            t1 = time.perf_counter()
            norm = None
            if clip and (kind == "torch" or a.user_clip):
                norm = torch.nn.utils.clip_grad_norm_(
                    r["model"].parameters(), clip)
                # (FSDP: a DTensor of the global norm)
                norm = float(norm.full_tensor() if hasattr(
                    norm, "full_tensor") else norm)
            r["opt"].step()
            t2 = time.perf_counter()
            if it == 0:
                continue  # the untimed one: creates the state
            rep = getattr(r["opt"], "last_report", None)
            if rep and clip:
                r["clipped"] += (norm > clip) if a.user_clip \
                    else rep.get("clip_coef", 1) < 1
                if rep.get("redone"):
                    r["redone"] += 1
                    r["redo_s"].append(rep.get("discarded_s", 0))
            r["fb"].append(t1 - t0)
            r["step"].append(t2 - t1)
            if rep:
                for p in rep["paths"]:
                    io = r["io"].setdefault(os.path.basename(p["root"]), 0)
                    r["io"][os.path.basename(p["root"])] = io + p["read"] + \
                        p["written"]
            print(f"  iteration {it} {kind:>10}: forward+backward "
                  f"{t1 - t0:6.2f} s, step {t2 - t1:6.2f} s", file=sys.stderr)
    out = dict(params=nparams, iters=a.iters, cache=a.cache, ranks=a.ranks,
               parallel="ddp" if a.ddp > 1 else "fsdp" if a.fsdp > 1
               else None,
               tokens_per_iteration=a.batch * a.ctx * a.accumulation, clip=clip or None,
               runs={})
    for kind, r in runs.items():
        fb, st = statistics.median(r["fb"]), statistics.median(r["step"])
        out["runs"][kind] = dict(
            forward_backward_s=fb, step_s=st, iteration_s=fb + st,
            path_bytes_per_step={k: v / a.iters for k, v in r["io"].items()})
        if clip and kind != "torch":
            out["runs"][kind].update(
                clipped_steps=r["clipped"], redone_steps=r["redone"],
                redo_rate=r["redone"] / a.iters,
                discarded_run_s=statistics.median(r["redo_s"])
                if r["redo_s"] else 0.0)
        if kind != "torch":
            r["opt"].close()
    ov, ib, no, tq = (out["runs"][k] for k in KINDS)
    update_s = no["step_s"]  # the whole update: I/O and kernel
    out["update_s"] = update_s
    out["overlap_vs_torch"] = ov["iteration_s"] / tq["iteration_s"]
    out["no_overlap_vs_torch"] = no["iteration_s"] / tq["iteration_s"]
    out["overlap_vs_bound"] = ov["iteration_s"] / max(
        ov["forward_backward_s"], update_s)
    out["hidden_share"] = 1 - (ov["step_s"] / update_s) if update_s else 0
    out["waiting_share"] = ov["step_s"] / ov["iteration_s"]
    out["in_backward_vs_torch"] = ib["iteration_s"] / tq["iteration_s"]
    out["in_backward_vs_bound"] = ib["iteration_s"] / max(
        tq["forward_backward_s"], update_s)
    if a.ranks > 1:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    if rank:
        return
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{'':12} {'iteration s':>12} {'fwd+bwd s':>10} {'step s':>8}")
    for kind, r in out["runs"].items():
        print(f"{kind:12} {r['iteration_s']:12.2f} "
              f"{r['forward_backward_s']:10.2f} {r['step_s']:8.2f}")
    print(f"update (all of it, no overlap): {update_s:.2f} s; with overlap "
          f"the step takes {ov['step_s']:.2f} s ({out['hidden_share']:.0%} "
          "hidden under forward+backward)")
    print(f"iteration with overlap: {out['overlap_vs_torch']:.2f}x "
          f"torch.optim.AdamW in RAM; {out['overlap_vs_bound']:.2f}x "
          "max(forward+backward, update); without overlap: "
          f"{out['no_overlap_vs_torch']:.2f}x torch")
    print(f"update in backward: {out['in_backward_vs_torch']:.2f}x torch; "
          f"{out['in_backward_vs_bound']:.2f}x max(torch's forward+backward, "
          "update)")
    if clip:
        ib_r = out["runs"]["in-backward"]
        print(f"clipping at {clip:.4g}: {ib_r['clipped_steps']} of "
              f"{a.iters} steps clipped; the update in backward redid "
              f"{ib_r['redone_steps']} (redo rate {ib_r['redo_rate']:.0%}; "
              f"a discarded speculative run took {ib_r['discarded_run_s']:.2f}"
              " s, median)")
    for kind in ("overlap", "in-backward", "no-overlap"):
        b = out["runs"][kind]["path_bytes_per_step"]
        print(f"{kind}: per step " + ", ".join(
            f"{k} {v / 2**30:.2f} GiB" for k, v in b.items()))


if __name__ == "__main__":
    main()
