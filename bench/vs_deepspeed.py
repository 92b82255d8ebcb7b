"""DeepSpeed's own NVMe optimizer-state swapper side by side with mlpo's
update step, in one run on the same disk, interleaved step by step.

DeepSpeed side: ZeRO-3's offload step as stage3.py runs it, on its own
async-I/O op (AsyncIOBuilder: libaio, its page-aligned locked buffers;
`scripts/deps.sh` installs libaio-dev) with its PipelinedOptimizerSwapper
(pipelined read and write, 12 buffers) and DeepSpeedCPUAdam over flat fp32
subgroups. Its timed step is backward's part (each subgroup's fp32
gradient swapped out, its norm taken) and step()'s: the overflow check on
the global norm, then per subgroup swap in (p, m, v and the gradient; the
next one's read started), unscale (stage3's unscale_and_clip_grads: loss
scale 1, no clipping -- still a pass over the gradient), the update, the
copy of the new fp32 parameters into the model's flat partition (stage3's
"fp16 copy"; the model is fp32 here, as on mlpo's side), swap out.

mlpo side: mlpo.torch.AdamW over the same subgroups and gradients, one
store path in the same directory, write-behind and read-ahead off (the
whole update is measured), durability "tag" (neither side syncs each
step), in the modes fp32, fp32 with a 25% DRAM tier, and int8 moments with
the tier (by default fp32 and int8 moments with the tier). Its timed step: the gradients read from p.grad, the update, the
new parameters written into the model's tensors.

--aio both adds DeepSpeed on mlpo's I/O engine (_mlpo.AioHandle, io_uring
with O_DIRECT, 4 KiB-aligned host buffers) as an A/B row; --aio mlpo runs
only that (a machine without libaio-dev). Before timing, the DeepSpeed
side is checked once against torch.optim.AdamW (three steps: parameters
and both moments). The stores go in --dir (default under /var/tmp, outside
the checkout) and are removed at the end, also after an error or ^C. The
run's peak memory is estimated first and refused above --memory-limit.

    .venv/bin/python bench/vs_deepspeed.py [--params 500M] [--subgroup 8388608]
        [--steps 3] [--warmup 1] [--modes fp32,int8+tier]
        [--aio deepspeed|mlpo|both] [--cache 25%] [--probe-seconds 6]
        [--memory-limit SIZE] [--dir DIR] [--json]
    .venv/bin/python bench/vs_deepspeed.py --validate-only [--aio ...]
"""
import argparse
import json
import os
import shutil
import signal
import socket
import sys
import time

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # (no GPU needed)
try:
    import torch
except ImportError as e:
    sys.exit(f"vs_deepspeed: needs PyTorch ({e}); run it with mlpo's venv")
try:
    import mlpo.torch as mt
    from mlpo import _mlpo
except ImportError as e:
    sys.exit(f"vs_deepspeed: cannot import mlpo ({e}); build it "
             "(scripts/build.sh) and run with PYTHONPATH=build/python")

MODES = {"fp32": ("fp32", None), "fp32+tier": ("fp32", "cache"),
         "int8+tier": ("int8-moments", "cache")}
HYPER = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


def count(text):
    t = str(text).strip().upper()
    mult = {"K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9}.get(t[-1:], 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


def size(text):
    """'16G', '512M', '2.5GiB' or bytes -> bytes (powers of 1024)."""
    t = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(t[-1:], 1)
    v = float(t[:-1] if mult > 1 else t) * mult
    if v != v or v == float("inf"):
        raise ValueError(text)
    return int(v)


def default_dir(what):
    """A disk directory outside the checkout (/var/tmp survives reboots and
    is no tmpfs, unlike /tmp on some machines), one per user."""
    return os.path.join("/var/tmp", f"mlpo-bench-{what}-{os.getuid()}")


def kib_field(path, name):
    """A "Name:  N kB" line of a /proc file, in bytes (None where
    unknown)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def available_memory():
    """MemAvailable, in bytes (None where unknown)."""
    return kib_field("/proc/meminfo", "MemAvailable")


def deepspeed_sides(aio):
    """The DeepSpeed rows of an --aio choice: (row name, I/O) each."""
    return {"deepspeed": [("deepspeed", "deepspeed")],
            "mlpo": [("deepspeed/mlpo-aio", "mlpo")],
            "both": [("deepspeed", "deepspeed"),
                     ("deepspeed/mlpo-aio", "mlpo")]}[aio]


def estimate_peak(a, n):
    """Bytes the run holds at its peak, fitted to three 0.5B runs here
    (VmHWM 16.6-22.6 GiB; this gives 1.10-1.17x each): one step's
    gradients (4 B a parameter); each mlpo mode's parameters and as much
    again inside the optimizer (8 B; the first mode's parameters are the
    initial values), plus its DRAM tier (--cache of its state: 12 B a
    parameter, 6 with int8 moments); each DeepSpeed row 16 B a parameter
    (its model partition, its optimizer's state tensors and swap buffers);
    1 GiB for the interpreter, torch and DeepSpeed; 10% more."""
    def tier(m):
        fmt, on = MODES[m]
        if not on:
            return 0.0
        state = (6 if fmt == "int8-moments" else 12) * n
        c = str(a.cache).strip()
        if c.endswith("%"):
            return state * float(c[:-1]) / 100
        try:
            return min(float(size(c)), state)
        except ValueError:
            return 0.25 * state
    ds = len(deepspeed_sides(a.aio))
    mlpo = sum(8 * n + tier(m) for m in a.modes) - (4 * n if a.modes else 0)
    held = 2**30 + 4 * n + mlpo + ds * 16 * n
    return int(1.1 * held)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--params", default="500M",
                    help="parameters (500M, 0.5B, 64M, ...; default 500M)")
    ap.add_argument("--subgroup", default="8388608",
                    help="elements per subgroup, both sides, a multiple of "
                         "1024 (O_DIRECT sizes; default 8388608, 8 Mi)")
    ap.add_argument("--steps", type=int, default=3,
                    help="timed steps each (default 3)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed steps each after the first, which creates "
                         "the state (default 1): DeepSpeed's first rewrite "
                         "of its files ran 3x its steady state here")
    ap.add_argument("--probe-seconds", type=float, default=6.0,
                    help="seconds of each mixed-bandwidth probe (default 6)")
    ap.add_argument("--modes", default="fp32,int8+tier",
                    help="mlpo's modes: " + ", ".join(MODES) + " (default "
                         "fp32,int8+tier: at 0.5B all three beside DeepSpeed "
                         "need about 24 GiB)")
    ap.add_argument("--cache", default="25%",
                    help="the DRAM tier of the +tier modes (default 25%%)")
    ap.add_argument("--buffers", type=int, default=12,
                    help="DeepSpeed's swap buffer_count (default 12)")
    ap.add_argument("--queue-depth", type=int, default=32,
                    help="I/O requests in flight, both sides (default 32)")
    ap.add_argument("--aio", default="deepspeed",
                    choices=("deepspeed", "mlpo", "both"),
                    help="DeepSpeed's I/O: its own async-I/O op (default; "
                         "needs libaio-dev), mlpo's engine in its place, or "
                         "both as two rows (an A/B of the I/O alone)")
    ap.add_argument("--memory-limit", default=None,
                    help="refuse a run whose estimated peak memory is above "
                         "this (e.g. 16G; default: the machine's available "
                         "memory)")
    ap.add_argument("--dir", default=default_dir("ds"),
                    help="the disk directory both sides use, removed at the "
                         "end (default %(default)s: outside the checkout)")
    ap.add_argument("--validate-only", action="store_true",
                    help="only check DeepSpeed against torch.optim.AdamW")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON object on stdout")
    a = ap.parse_args(argv)
    try:
        a.params, a.subgroup = count(a.params), count(a.subgroup)
    except ValueError:
        ap.error("--params and --subgroup take counts such as 500M or 8M")
    if a.memory_limit is not None:
        try:
            a.memory_limit = size(a.memory_limit)
        except ValueError:
            ap.error(f"--memory-limit: not a size: {a.memory_limit!r} "
                     "(e.g. 16G)")
        if a.memory_limit <= 0:
            ap.error("--memory-limit must be positive")
    a.modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in a.modes if m not in MODES]
    if bad:
        ap.error(f"--modes: unknown {', '.join(bad)} (choose from "
                 f"{', '.join(MODES)})")
    if a.subgroup < 1024 or a.subgroup % 1024:
        ap.error("--subgroup must be a multiple of 1024 (O_DIRECT sizes)")
    if a.params < a.subgroup:
        ap.error("--params must be at least one --subgroup")
    if a.steps < 1 or a.warmup < 0 or a.buffers < 4 or a.queue_depth < 1 \
            or not 0.1 <= a.probe_seconds <= 600:
        ap.error("--steps >= 1, --warmup >= 0, --buffers >= 4, "
                 "--queue-depth >= 1, --probe-seconds 0.1..600")
    return a


def say(*args):
    print(*args, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- DeepSpeed

class ProjectAio:
    """The aio handle DeepSpeed's swappers call, on mlpo's I/O engine."""

    def __init__(self, block_size=1 << 20, queue_depth=32, **_):
        self._h = _mlpo.AioHandle(block_size, queue_depth)
        self._locked = {}  # data_ptr -> (tensor, bytes)

    @staticmethod
    def _span(t):
        return t.data_ptr(), t.numel() * t.element_size()

    def async_pread(self, buffer, path, offset=0):
        return self._h.pread(*self._span(buffer), str(path), offset)

    def async_pwrite(self, buffer, path, offset=0):
        return self._h.pwrite(*self._span(buffer), str(path), offset)

    def wait(self):
        return self._h.wait()

    def new_cpu_locked_tensor(self, num_elems, example):
        """A 4 KiB-aligned host tensor (no device: nothing to page-lock)."""
        es = example.element_size()
        raw = torch.empty(num_elems + 4096 // es, dtype=example.dtype)
        skip = (-raw.data_ptr() % 4096) // es
        t = raw.narrow(0, skip, num_elems)
        self._locked[t.data_ptr()] = (raw, num_elems * es)
        return t

    def free_cpu_locked_tensor(self, t):
        self._locked.pop(t.data_ptr(), None)

    def is_pinned(self, t):
        p = t.data_ptr()
        return any(b <= p < b + n for b, (_, n) in self._locked.items())


class ProjectAioBuilder:
    """Stands in for DeepSpeed's AsyncIOBuilder: load() gives a module
    whose aio_handle is ProjectAio."""

    def load(self, *_, **__):
        return type("project_aio", (), {"aio_handle": ProjectAio})


def deepspeed_aio_status():
    """(usable, what): whether DeepSpeed's own async-I/O op can build here
    (AsyncIOBuilder of its accelerator, libaio found), and what it is."""
    try:
        from deepspeed.ops.op_builder import AsyncIOBuilder
    except ImportError as e:
        return False, f"DeepSpeed is not importable ({e})"
    b = AsyncIOBuilder()
    what = f"{type(b).__module__}.{type(b).__name__}"
    if not b.is_compatible(verbose=False):
        return False, (f"{what} is not compatible here (libaio-dev missing? "
                       "scripts/deps.sh installs it)")
    return True, what


def deepspeed_setup():
    """Imports DeepSpeed on the CPU accelerator; make(..., aio) builds a
    swapper on DeepSpeed's own async-I/O op or on mlpo's engine."""
    try:
        import deepspeed
        import deepspeed.comm as ds_dist
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        from deepspeed.runtime.swap_tensor import pipelined_optimizer_swapper
        from deepspeed.runtime.swap_tensor.constants import (
            AIO_BLOCK_SIZE, AIO_QUEUE_DEPTH, AIO_SINGLE_SUBMIT,
            AIO_OVERLAP_EVENTS, AIO_INTRA_OP_PARALLELISM)
        from deepspeed.runtime.zero.offload_config import \
            DeepSpeedZeroOffloadOptimizerConfig
    except ImportError as e:
        sys.exit(f"vs_deepspeed: DeepSpeed is not importable ({e}); "
                 "scripts/venv.sh installs the pinned one")
    own_builder = pipelined_optimizer_swapper.AsyncIOBuilder
    if not ds_dist.is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ds_dist.init_distributed(
            dist_backend="gloo", auto_mpi_discovery=False, verbose=False,
            init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)

    def make(folder, n_sub, numel, buffers, queue_depth, aio_kind):
        cfg = DeepSpeedZeroOffloadOptimizerConfig(
            device="nvme", nvme_path=folder, buffer_count=buffers,
            pipeline_read=True, pipeline_write=True)
        aio = {AIO_BLOCK_SIZE: 1 << 20, AIO_QUEUE_DEPTH: queue_depth,
               AIO_SINGLE_SUBMIT: False, AIO_OVERLAP_EVENTS: True,
               AIO_INTRA_OP_PARALLELISM: 1}
        params = []
        for i in range(n_sub):
            p = torch.nn.Parameter(torch.empty(numel))
            p.ds_id = str(i)  # (stage3's flat groups' ids are strings)
            params.append(p)
        opt = DeepSpeedCPUAdam(params, adamw_mode=True, **HYPER)
        for g in opt.param_groups:
            g["params"] = []
        # The swapper takes its handles (and its buffers, from them) from
        # the module's AsyncIOBuilder when it is made.
        pipelined_optimizer_swapper.AsyncIOBuilder = \
            own_builder if aio_kind == "deepspeed" else ProjectAioBuilder
        try:
            swapper = pipelined_optimizer_swapper.PipelinedOptimizerSwapper(
                swap_config=cfg, aio_config=aio, base_folder=folder,
                optimizer=opt, largest_numel=numel, device="cpu",
                dtype=torch.float32, timers=None)
        finally:
            pipelined_optimizer_swapper.AsyncIOBuilder = own_builder
        return DeepSpeedRun(params, opt, swapper)

    return deepspeed.__version__, make


class DeepSpeedRun:
    """ZeRO-3's offload step (stage3.py) over flat fp32 subgroups."""

    LOSS_SCALE = 1.0  # fp32 training: stage3 still unscales (a pass)

    def __init__(self, params, opt, swapper):
        self.params, self.opt, self.swapper = params, opt, swapper
        self.model = []  # the model's flat partitions (stage3's fp16 groups)
        self.grad_norm = None

    def init(self, values):
        self.swapper.initialize_parameters(parameters=self.params,
                                           src_tensors=values)
        self.model = [v.clone() for v in values]
        for p in self.params:
            p.data = torch.empty(0)  # swapped out: no host copy kept

    def step(self, grads):
        """Backward's part (gradients swapped out, their norms), then
        stage3's step(): overflow check, and per subgroup swap in,
        unscale, update, copy to the model, swap out."""
        sw, ps = self.swapper, self.params
        sq = []
        for p, g in zip(ps, grads):
            sq.append(g.double().norm(2) ** 2)  # (cpu offload: in backward)
            sw.swap_out_gradients(parameter=p, gradient_offsets=[0],
                                  gradient_tensors=[g])
        sw.flush_gradients()
        total = float(sum(sq)) ** 0.5
        if total != total or total == float("inf"):  # overflow: skipped
            return False
        self.grad_norm = total / self.LOSS_SCALE
        for i, p in enumerate(ps):
            nxt = ps[i + 1] if i + 1 < len(ps) else None
            sw.swap_in_optimizer_state(parameter=p, async_parameter=nxt)
            p.grad.mul_(1.0 / self.LOSS_SCALE)  # unscale_and_clip_grads
            self.opt.param_groups[0]["params"] = [p]
            self.opt.step()
            self.opt.param_groups[0]["params"] = []
            self.model[i].copy_(p.data)  # the "fp16 copy"
            sw.swap_out_optimizer_state(parameter=p,
                                        async_swap=nxt is not None)
            p.grad = None
        return True

    def read(self, i):
        """Subgroup i's (param, exp_avg, exp_avg_sq), swapped in and back."""
        p = self.params[i]
        self.swapper.swap_in_optimizer_state(parameter=p, async_parameter=None)
        st = self.opt.state[p]
        out = (p.data.clone(), st["exp_avg"].clone(), st["exp_avg_sq"].clone())
        self.swapper.release_swap_buffers(parameter=p)
        p.grad = None
        return out


def validate(make, folder, aio_kind):
    """DeepSpeed's swapper and CPU Adam after three steps against
    torch.optim.AdamW on the same gradients: the largest differences (the
    model's copy of the parameters included)."""
    n_sub, numel = 3, 1 << 19  # (above DeepSpeed's 1 MB: swapped)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    gen = torch.Generator().manual_seed(5)
    init = [torch.randn(numel, generator=gen) for _ in range(n_sub)]
    ds = make(folder, n_sub, numel, 12, 8, aio_kind)
    ds.init([t.clone() for t in init])
    ref = [torch.nn.Parameter(t.clone()) for t in init]
    ropt = torch.optim.AdamW(ref, **HYPER)
    for _ in range(3):
        grads = [torch.randn(numel, generator=gen) for _ in range(n_sub)]
        ds.step(grads)
        for p, g in zip(ref, grads):
            p.grad = g.clone()
        ropt.step()
    worst = {"param": 0.0, "exp_avg": 0.0, "exp_avg_sq": 0.0,
             "model_copy": 0.0}
    for i, p in enumerate(ref):
        worst["model_copy"] = max(worst["model_copy"], (
            ds.model[i] - p.detach()).abs().max().item())
        got = ds.read(i)
        st = ropt.state[p]
        for k, a, b in zip(list(worst)[:3], got, (p.detach(), st["exp_avg"],
                                         st["exp_avg_sq"])):
            worst[k] = max(worst[k], ((a - b).abs() /
                                      (b.abs() + 1e-12)).max().item()
                           if k == "exp_avg_sq" else (a - b).abs().max().item())
    shutil.rmtree(folder, ignore_errors=True)
    return worst


# -------------------------------------------------------------- the disk

def probe_mixed(folder, seconds, chunk=4 << 20, depth=16):
    """The directory's mixed read+write bandwidth (bytes/s): a file read
    while another is written, O_DIRECT through mlpo's I/O engine, for
    about `seconds`."""
    os.makedirs(folder, exist_ok=True)
    src, dst = (os.path.join(folder, f"probe-{k}") for k in ("r", "w"))
    aio = ProjectAio(queue_depth=depth * 2)
    buf = [aio.new_cpu_locked_tensor(chunk // 4, torch.empty(0))
           for _ in range(2 * depth)]
    for b in buf:
        b.fill_(1.0)
    size = 256 * chunk
    for k in range(0, size, chunk):  # the file read
        aio.async_pwrite(buf[0], src, k)
    aio.wait()
    moved, t0, k = 0, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        for j in range(depth):
            off = ((k + j) * chunk) % size
            aio.async_pread(buf[j], src, off)
            aio.async_pwrite(buf[depth + j], dst, off)
        aio.wait()
        moved += 2 * depth * chunk
        k += depth
    rate = moved / (time.perf_counter() - t0)
    for f in (src, dst):
        os.unlink(f)
    return rate


# ------------------------------------------------------------------ mlpo

class MlpoRun:
    def __init__(self, folder, mode, n_sub, numel, values, cache, depth,
                 share=False):
        fmt, tier = MODES[mode]
        os.makedirs(folder, exist_ok=True)
        self.params = [torch.nn.Parameter(v if share else v.clone())
                       for v in values]
        store = {"path": [{"root": folder, "kind": "nvme",
                           "queue_depth": depth}],
                 "cache": cache if tier else 0, "durability": "tag",
                 "write_behind": False, "read_ahead": False}
        self.opt = mt.AdamW(self.params, **HYPER, store=store,
                            subgroup_numel=numel, state_format=fmt)

    def step(self, grads):
        for p, g in zip(self.params, grads):
            p.grad = g
        self.opt.step()
        rep = self.opt.last_report
        return rep["bytes_read"] + rep["bytes_written"]


def main(argv=None):
    a = parse_args(argv)
    # A scheduler's stop (SIGTERM) unwinds like ^C, so that the stores
    # are removed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # DeepSpeed prints to stdout (its ops' builds, its swapper's settings):
    # everything goes to stderr until the results, so that stdout is the
    # table or the JSON alone.
    sys.stdout.flush()
    real_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        out = run(a)
    finally:
        sys.stdout.flush()
        os.dup2(real_stdout, 1)
        os.close(real_stdout)
    if out is not None:
        report(a, out)


INCLUDES = {
    "deepspeed": "gradients swapped out with their norms (backward's part), "
                 "overflow check, per subgroup: swap in p, m, v and the "
                 "gradient, unscale, update, copy to the model, swap out",
    "mlpo": "gradients read from p.grad, update over the store (reads and "
            "writes of the state), new parameters written to the model",
}


def run(a):
    sides = deepspeed_sides(a.aio)
    if any(io == "deepspeed" for _, io in sides):
        ok, what = deepspeed_aio_status()
        if not ok:
            sys.exit(f"vs_deepspeed: DeepSpeed's own async-I/O op: {what}. "
                     "`--aio mlpo` runs DeepSpeed on mlpo's I/O engine "
                     "instead (named so in the output)")
        say(f"vs_deepspeed: DeepSpeed's own async-I/O op ({what}); its "
            "first use builds it (minutes), later runs load it")
    n_sub = -(-a.params // a.subgroup)
    numel = a.subgroup
    n = n_sub * numel
    need = estimate_peak(a, n)
    limit = a.memory_limit or available_memory()
    if limit is not None and need > limit:
        sys.exit(f"vs_deepspeed: the run would hold about {need / 2**30:.1f} "
                 f"GiB at its peak ({n / 1e9:.2f}B parameters, "
                 f"{len(a.modes)} mlpo modes, {len(sides)} DeepSpeed "
                 f"side(s)), above {'--memory-limit' if a.memory_limit else 'the available memory'} "
                 f"({limit / 2**30:.1f} GiB); nothing was run. Use fewer "
                 "--modes, one --aio, or a smaller --params")
    version, make = deepspeed_setup()
    root = os.path.abspath(a.dir)
    if not os.path.isdir(os.path.dirname(root)):
        sys.exit(f"vs_deepspeed: --dir {a.dir}: {os.path.dirname(root)} "
                 "does not exist")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    try:
        return measure(a, version, make, root, sides, n_sub, numel, need)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure(a, version, make, root, sides, n_sub, numel, need):
    worst = {}
    for name, io in sides:
        w = validate(make, os.path.join(root, "validate"), io)
        ok = w["param"] < 1e-5 and w["exp_avg"] < 1e-5 and \
            w["exp_avg_sq"] < 1e-4 and w["model_copy"] < 1e-5
        say(f"vs_deepspeed: {name} (DeepSpeed {version}) against "
            f"torch.optim.AdamW, 3 steps: largest difference param "
            f"{w['param']:.1e}, exp_avg {w['exp_avg']:.1e}, exp_avg_sq "
            f"{w['exp_avg_sq']:.1e} (relative), the model's copy "
            f"{w['model_copy']:.1e} -> {'the same' if ok else 'DIFFERENT'}")
        if not ok:
            sys.exit("vs_deepspeed: DeepSpeed's swapper does not compute "
                     "torch's AdamW here; no comparison")
        worst[name] = w
    if a.validate_only:
        return None
    if any(io == "mlpo" for _, io in sides):
        say("vs_deepspeed: deepspeed/mlpo-aio is DeepSpeed with mlpo's I/O "
            "engine as its aio handle (_mlpo.AioHandle, "
            f"{_mlpo.AioHandle().kind}, O_DIRECT) and 4 KiB-aligned host "
            "tensors as its buffers: an A/B of the I/O, not DeepSpeed as "
            "users run it")
    n = n_sub * numel
    gen = torch.Generator().manual_seed(1)
    values = [torch.randn(numel, generator=gen) * 0.02 for _ in range(n_sub)]
    say(f"vs_deepspeed: {n / 1e9:.2f}B parameters in {n_sub} subgroups of "
        f"{numel / 1e6:.1f}M, one path ({root}); estimated peak memory "
        f"{need / 2**30:.1f} GiB; probing the disk")
    rate_before = probe_mixed(os.path.join(root, "probe"), a.probe_seconds)
    runs = {}
    for name, io in sides:
        ds = make(os.path.join(root, name.replace("/", "-")), n_sub, numel,
                  a.buffers, a.queue_depth, io)
        ds.init(values)
        runs[name] = ds
    for idx, m in enumerate(a.modes):
        # The first mode takes the initial values themselves (DeepSpeed
        # holds them on disk now): one model fewer in memory.
        runs[f"mlpo {m}"] = MlpoRun(os.path.join(root, m.replace("+", "-")),
                                    m, n_sub, numel, values, a.cache,
                                    a.queue_depth, share=idx == 0)
    del values
    times = {k: [] for k in runs}
    moved = {k: 0 for k in runs}
    names = list(runs)
    untimed = 1 + a.warmup
    grads = [torch.empty(numel) for _ in range(n_sub)]
    for s in range(untimed + a.steps):
        for g in grads:  # drawn in place: one step's gradients in memory
            g.normal_(generator=gen).mul_(1e-3)
        order = names[s % len(names):] + names[:s % len(names)]
        for k in order:
            t0 = time.perf_counter()
            if k.startswith("deepspeed"):
                runs[k].step(grads)
                b = 32 * n  # grads out, then p, m, v, g in and p, m, v out
            else:
                b = runs[k].step(grads)
            dt = time.perf_counter() - t0
            say(f"  step {s} {k:>18}: {dt:6.2f} s "
                f"({n / dt / 1e6:6.1f} M params/s)"
                f"{'' if s >= untimed else ' untimed'}")
            if s >= untimed:
                times[k].append(dt)
                moved[k] += b
    rate_after = probe_mixed(os.path.join(root, "probe"), a.probe_seconds)
    u = max(rate_before, rate_after)
    out = dict(deepspeed=version, params=n, subgroups=n_sub,
               subgroup=numel, steps=a.steps, mixed_bps=u, aio=a.aio,
               validation=worst, estimated_peak_bytes=need,
               peak_rss_bytes=peak_rss(), includes=INCLUDES, runs={})
    for k in runs:
        st = sorted(times[k])[len(times[k]) // 2]
        per_step = moved[k] / len(times[k])
        bound = per_step / u
        out["runs"][k] = dict(step_s=st, params_per_s=n / st,
                              bytes_per_step=per_step, bound_s=bound,
                              of_bound=bound / st)
    ref = sides[0][0]
    out["reference"] = ref
    base = out["runs"][ref]["params_per_s"]
    for r in out["runs"].values():
        r["vs_deepspeed"] = r["params_per_s"] / base
    for k in runs:
        if not k.startswith("deepspeed"):
            runs[k].opt.close()
    return out


def peak_rss():
    """The process's peak resident memory in bytes (VmHWM)."""
    return kib_field("/proc/self/status", "VmHWM")


def report(a, out):
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"DeepSpeed {out['deepspeed']} PipelinedOptimizerSwapper + "
          f"DeepSpeedCPUAdam vs mlpo, {out['params'] / 1e9:.2f}B params, "
          f"one path, mixed {out['mixed_bps'] / 1e9:.2f} GB/s (median of "
          f"{a.steps} steps each); ratios against {out['reference']}")
    print(f"{'':20}{'M params/s':>11}{'step s':>8}{'GiB/step':>9}"
          f"{'bound s':>8}{'of bound':>9}{'vs DS':>7}")
    for k, r in out["runs"].items():
        print(f"{k:20}{r['params_per_s'] / 1e6:11.1f}{r['step_s']:8.2f}"
              f"{r['bytes_per_step'] / 2**30:9.2f}{r['bound_s']:8.2f}"
              f"{r['of_bound']:9.2f}{r['vs_deepspeed']:7.2f}")
    print("deepspeed = DeepSpeed on its own async-I/O op; deepspeed/mlpo-aio "
          "= DeepSpeed on mlpo's I/O engine (an A/B of the I/O)")
    for side, what in out["includes"].items():
        print(f"{side}'s timed step: {what}")
    if out.get("peak_rss_bytes"):
        print(f"peak memory {out['peak_rss_bytes'] / 2**30:.1f} GiB "
              f"(estimated {out['estimated_peak_bytes'] / 2**30:.1f})")


if __name__ == "__main__":
    main()
