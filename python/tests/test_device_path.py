"""The device path of the adapter: gradients staged from the parameters'
memory by the engine's backend and new parameters copied into the model by
the step itself. device_backend="host" runs that path with memcpy on CPU
tensors; on a machine with a GPU the CUDA test runs it on CUDA tensors."""
import copy

import pytest
import torch

import mlpo.torch as mt
from helpers import make_model, two_groups, loss_of, max_diff


def train(model, opt, steps):
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss_of(model, step).backward()
        opt.step()


def test_host_device_path_is_bit_identical_to_the_plain_path(tmp_path):
    # A small subgroup so one subgroup spans several tensors and one tensor
    # several subgroups (the sink copies into each piece it overlaps).
    a = make_model()
    b = copy.deepcopy(a)
    ref = copy.deepcopy(a)
    kw = dict(lr=3e-3, subgroup_numel=100)
    oa = mt.AdamW(two_groups(a, named=True), store=str(tmp_path / "a"),
                  device_backend="host", **kw)
    ob = mt.AdamW(two_groups(b, named=True), store=str(tmp_path / "b"), **kw)
    ro = torch.optim.AdamW(two_groups(ref), lr=3e-3)
    assert oa._engine.device_backend == "host"
    assert ob._engine.device_backend == ""
    train(a, oa, 12)
    train(b, ob, 12)
    train(ref, ro, 12)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert max_diff(a, ref) <= 1e-6
    # A checkpoint: two more steps, then back to it in a new optimizer (the
    # model's tensors get the tag's parameters through the device path).
    sd = oa.state_dict()
    saved = [p.detach().clone() for p in a.parameters()]
    train(a, oa, 2)
    train(b, ob, 2)
    oa.close()
    oc = mt.AdamW(two_groups(a, named=True), store=str(tmp_path / "a"),
                  device_backend="host", **kw)
    oc.load_state_dict(sd)
    for p, q in zip(a.parameters(), saved):
        assert torch.equal(p, q)
    train(a, oc, 2)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


def test_host_device_path_skips_an_overflowing_step(tmp_path):
    model = make_model()
    opt = mt.AdamW(model.parameters(), lr=1e-2, store=str(tmp_path / "s"),
                   device_backend="host")
    train(model, opt, 2)
    before = [p.detach().clone() for p in model.parameters()]
    opt.zero_grad()
    loss_of(model, 5).backward()
    next(model.parameters()).grad[0, 0] = float("inf")
    opt.step()
    assert opt.last_report["skipped"]
    for p, q in zip(model.parameters(), before):
        assert torch.equal(p, q)


def test_device_path_bad_inputs(tmp_path):
    model = make_model()
    with pytest.raises(ValueError, match="device_backend must be"):
        mt.AdamW(model.parameters(), store=str(tmp_path / "x"),
                 device_backend="gpu")
    with pytest.raises(ValueError, match="needs the parameters on a CUDA"):
        mt.AdamW(model.parameters(), store=str(tmp_path / "y"),
                 device_backend="cuda")
    opt = mt.AdamW(model.parameters(), store=str(tmp_path / "z"),
                   device_backend="host")
    train(model, opt, 1)
    # The model's memory moved under the optimizer: refused, nothing lost.
    p0 = next(model.parameters())
    kept = p0.detach().clone()
    p0.data = p0.data.clone()
    opt.zero_grad()
    loss_of(model, 3).backward()
    with pytest.raises(ValueError, match="moved to new memory"):
        opt.step()
    assert torch.equal(p0, kept)
    assert opt.step_count == 1


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="GPU test skipped: torch sees no CUDA device")
def test_cuda_model_matches_torch_optim_on_the_gpu(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                                torch.nn.Linear(512, 64)).cuda()
    ref = copy.deepcopy(model)
    opt = mt.AdamW(model.parameters(), lr=1e-3, store=str(tmp_path / "g"),
                   subgroup_numel=1 << 15)
    assert opt._engine.device_backend == "cuda"
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    g = torch.Generator(device="cuda").manual_seed(1)
    for step in range(20):
        x = torch.randn(32, 256, device="cuda", generator=g)
        for m, o in ((model, opt), (ref, ropt)):
            o.zero_grad()
            m(x).pow(2).mean().backward()
            o.step()
    assert all(p.is_cuda for p in model.parameters())
    assert max_diff(model, ref) <= 1e-5


def test_the_default_falls_back_to_the_plain_step_and_says_so_once(tmp_path):
    """Device parameters (here the host backend's path): the update during
    backward cannot run; left at its default the optimizer runs the plain
    step and says so once per process and reason; True is refused."""
    import warnings
    from mlpo import _backward_choice
    _backward_choice._told_plain.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for k in range(2):
            model = make_model()
            opt = mt.AdamW(model.parameters(), lr=1e-2,
                           store=str(tmp_path / f"s{k}"),
                           device_backend="host")
            assert not opt.update_in_backward
            train(model, opt, 2)
            assert opt.step_count == 2
            assert opt.last_report["in_backward"] is False
            opt.close()
    notes = [w for w in seen if issubclass(w.category, mt.PlainStepNote)]
    assert len(notes) == 1 and "device" in str(notes[0].message)
    with pytest.raises(ValueError, match="update_in_backward=True is refused"):
        mt.AdamW(make_model().parameters(), store=str(tmp_path / "t"),
                 device_backend="host", update_in_backward=True)
