"""FSDP (torch 2.x fully_shard, 2 CPU ranks over gloo) with mlpo.torch:
each rank updates its local shards; side by side with torch.optim.AdamW
under the same FSDP loop; the update during backward equal to the plain
step bit for bit; a checkpoint resumed on 2 ranks exactly; a
checkpoint of 2 FSDP ranks loaded into one process and into mlpo's own
data parallel, and one of one process loaded into FSDP ranks; export of
an FSDP checkpoint puts its shards together."""
import os

import pytest
import torch

import mlpo.torch as mt
from mlpo._backward_choice import fsdp_hooks_after_reduce
from test_distributed import free_port, launch_json

TOL = 1e-6
# fully_shard on the CPU (gloo) fails inside torch before 2.8 (2.6:
# "'Stream' object has no attribute 'record_event'", with torch.optim too).
needs_cpu_fsdp = pytest.mark.skipif(
    tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 8),
    reason=f"FSDP's fully_shard does not run on the CPU in torch "
    f"{torch.__version__} (it does from 2.8)")


def run(tmp_path, build_python_path, world, out, **kw):
    return launch_json(tmp_path, build_python_path, world, out,
                       worker="fsdp_worker.py", **kw)


def diff(a, b):
    return max(abs(x - y) for n in a["params"]
               for x, y in zip(a["params"][n], b["params"][n]))


@needs_cpu_fsdp
def test_fsdp_matches_torch_and_resumes(tmp_path, build_python_path):
    ref = run(tmp_path, build_python_path, 2, tmp_path / "ref.json",
              optimizer="torch", clip=0.5)
    full = run(tmp_path, build_python_path, 2, tmp_path / "full.json",
               store=tmp_path / "s", clip=0.5, save_at=4,
               save=tmp_path / "ck.pt")
    assert full["world"] == 2
    assert diff(full, ref) <= TOL
    assert max(abs(full["losses"][k] - ref["losses"][k])
               for k in ref["losses"]) <= TOL
    # Resume on 2 ranks from step 4 (other processes, the same store).
    resumed = run(tmp_path, build_python_path, 2, tmp_path / "res.json",
                  store=tmp_path / "s", clip=0.5, start=4,
                  load=tmp_path / "ck.pt")
    assert resumed["params"] == full["params"]
    assert all(resumed["losses"][k] == full["losses"][k]
               for k in resumed["losses"])
    # The same checkpoint into one process (no FSDP): it reads both
    # ranks' shards and goes on as the 2-rank run did.
    one = run(tmp_path, build_python_path, 1, tmp_path / "one.json",
              store=tmp_path / "s1", clip=0.5, start=4,
              load=tmp_path / "ck.pt")
    assert diff(one, full) <= TOL
    # export_state_dict puts the shards together: torch.optim's dict of
    # the model at step 4, its masters what the 2-rank run had then.
    sd = torch.load(tmp_path / "ck.pt", weights_only=True)["opt"]
    exp = mt.export_state_dict(sd)
    w = exp["master_params"]["0.weight"]
    assert w.shape == (33, 16)
    assert exp["state"][0]["exp_avg"].shape == (33, 16)
    assert float(exp["state"][0]["step"]) == 4


@needs_cpu_fsdp
@pytest.mark.skipif(not fsdp_hooks_after_reduce(),
                    reason="this torch's FSDP does not run the parameters' "
                    "hooks after its reduce-scatter: the plain step runs")
@pytest.mark.parametrize("clip, accumulation", [(0.0, 1), (0.5, 1),
                                                (0.0, 2)],
                         ids=["plain", "clipping", "accumulation"])
def test_fsdp_update_in_backward_is_the_plain_step(tmp_path,
                                                   build_python_path, clip,
                                                   accumulation):
    """Under FSDP each rank's shard of the gradients goes to the running
    step when FSDP's reduce-scatter puts it in place (torch 2.15 runs the
    sharded parameter's hooks there): the result is the plain step's bit
    for bit on every rank, with clipping decided from the ranks' summed
    statistics (a clipped step is redone) and with accumulation (the
    update runs in the last backward)."""
    kw = dict(clip=clip, accumulation=accumulation)
    off = run(tmp_path, build_python_path, 2, tmp_path / "off.json",
              store=tmp_path / "off", in_backward="off", **kw)
    on = run(tmp_path, build_python_path, 2, tmp_path / "on.json",
             store=tmp_path / "on", in_backward="on", **kw)
    assert off["in_backward"] == 0
    # Steps ran during backward (the first with accumulation learns the
    # count; clipping that clips twice in a row pauses the speculation).
    assert on["in_backward"] >= 4, on["in_backward"]
    assert on["params"] == off["params"]
    assert on["losses"] == off["losses"]


@needs_cpu_fsdp
def test_one_process_checkpoint_into_fsdp(tmp_path, build_python_path):
    full = run(tmp_path, build_python_path, 1, tmp_path / "full.json",
               store=tmp_path / "s", save_at=3, save=tmp_path / "ck.pt")
    two = run(tmp_path, build_python_path, 2, tmp_path / "two.json",
              store=tmp_path / "s2", start=3, load=tmp_path / "ck.pt")
    assert diff(two, full) <= TOL


def test_mixed_dtensor_and_plain_parameters_are_refused(tmp_path):
    # One rank world (gloo) in this process: a DTensor beside a plain one.
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(free_port())
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        a = torch.nn.Parameter(distribute_tensor(torch.randn(4, 2), mesh,
                                                 [Shard(0)]))
        b = torch.nn.Parameter(torch.randn(3))
        with pytest.raises(ValueError, match="DTensors .* plain tensors"):
            mt.AdamW([a, b], store=str(tmp_path / "s"))
        assert not os.path.exists(tmp_path / "s" / "mlpo")
    finally:
        dist.destroy_process_group()


def test_parameters_swapped_for_dtensors_after_the_optimizer_says_so(
        tmp_path):
    """Accelerate's and Trainer's FSDP plugins make the optimizer first and
    then put FSDP's DTensors into its param_groups: refused at step(),
    naming what happened and the way that works, nothing changed."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(free_port())
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        w = torch.nn.Parameter(torch.randn(4, 2))
        opt = mt.AdamW([w], store=str(tmp_path / "s"))
        mesh = init_device_mesh("cpu", (1,))
        d = torch.nn.Parameter(distribute_tensor(w.detach(), mesh,
                                                 [Shard(0)]))
        opt.param_groups[0]["params"] = [d]  # as the plugins do
        d.grad = distribute_tensor(torch.ones(4, 2), mesh, [Shard(0)])
        with pytest.raises(ValueError, match="FSDP's sharded ones"):
            opt.step()
        assert opt.step_count == 0
    finally:
        dist.destroy_process_group()
