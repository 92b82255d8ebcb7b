"""The update rules over the store, side by side with their references:
torch.optim.SGD, Adagrad, Adam/AdamW with amsgrad, Adamax (per group,
with a schedule, through state dicts both ways), Lion against a float64 loop of
its paper; parameters torch takes that the engine cannot read in place
(float64, complex, gaps in memory); and the refusals that keep a store's
rule and slots what they were when it was created."""
import numpy as np
import pytest
import torch

import mlpo.torch as mt
from helpers import loss_of, make_model, max_diff, two_groups

RULES = [
    (mt.SGD, torch.optim.SGD,
     [dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-2),
      dict(lr=0.02, momentum=0.8, nesterov=True)]),
    (mt.SGD, torch.optim.SGD, [dict(lr=0.05, maximize=True),
                               dict(lr=0.02, weight_decay=0.1)]),
    (mt.Adagrad, torch.optim.Adagrad,
     [dict(lr=0.05, lr_decay=0.01, initial_accumulator_value=0.1,
           weight_decay=1e-2), dict(lr=0.1, eps=1e-6, maximize=True)]),
    (mt.AdamW, torch.optim.AdamW,
     [dict(lr=1e-2, amsgrad=True), dict(lr=3e-3, weight_decay=0.0)]),
    (mt.Adam, torch.optim.Adam,
     [dict(lr=1e-2, amsgrad=True, weight_decay=0.1, maximize=True),
      dict(lr=5e-3, amsgrad=True)]),
    (mt.Adamax, torch.optim.Adamax,
     [dict(lr=2e-3, weight_decay=1e-2),
      dict(lr=1e-2, eps=1e-6, betas=(0.8, 0.99), maximize=True)]),
]
IDS = ["sgd-momentum", "sgd-plain", "adagrad", "adamw-amsgrad",
       "adam-amsgrad-maximize", "adamax"]


def groups_of(model, opts):
    g = two_groups(model)
    return [{**g[0], **opts[0]}, {**g[1], **opts[1]}]


def train(model, opt, steps, start=0, sched=None):
    for s in range(start, start + steps):
        opt.zero_grad()
        loss_of(model, s).backward()
        opt.step()
        if sched is not None:
            sched.step()


@pytest.mark.parametrize("ours, theirs, opts", RULES, ids=IDS)
def test_rule_matches_torch_with_groups_and_a_schedule(tmp_path, ours,
                                                       theirs, opts):
    m, r = make_model(), make_model()
    o = ours(groups_of(m, opts), store=str(tmp_path / "s"))
    ro = theirs(groups_of(r, opts))
    so = torch.optim.lr_scheduler.StepLR(o, 5, gamma=0.5)
    sr = torch.optim.lr_scheduler.StepLR(ro, 5, gamma=0.5)
    train(m, o, 15, sched=so)
    train(r, ro, 15, sched=sr)
    assert max_diff(m, r) < 2e-6
    # opt.state as torch's: the same keys and values
    for p, q in zip(m.parameters(), r.parameters()):
        mine, want = o.state[p], ro.state[q]
        assert sorted(mine) == sorted(k for k, v in want.items()
                                      if v is not None), (mine.keys(),
                                                          want.keys())
        for k in mine:
            assert torch.allclose(torch.as_tensor(mine[k]).float(),
                                  torch.as_tensor(want[k]).float(),
                                  atol=2e-6), k
    o.close()


@pytest.mark.parametrize("ours, theirs, opts", RULES, ids=IDS)
def test_state_dicts_move_between_mlpo_and_torch(tmp_path, ours, theirs,
                                                 opts):
    """torch.optim's dict (max_exp_avg_sq, sum, momentum_buffer) loads
    into mlpo and trains on as torch does; mlpo's exported dict loads into
    torch.optim the same way."""
    m, r = make_model(), make_model()
    ro = theirs(groups_of(r, opts))
    train(r, ro, 6)
    m.load_state_dict(r.state_dict())
    o = ours(groups_of(m, opts), store=str(tmp_path / "a"))
    o.load_state_dict(ro.state_dict())
    train(m, o, 5, start=6)
    train(r, ro, 5, start=6)
    assert max_diff(m, r) < 2e-6
    # ... and back: mlpo's state into a fresh torch.optim optimizer
    back = make_model()
    back.load_state_dict(m.state_dict())
    bo = theirs(groups_of(back, opts))
    bo.load_state_dict(mt.export_state_dict(o.state_dict()))
    train(back, bo, 4, start=11)
    train(m, o, 4, start=11)
    assert max_diff(m, back) < 2e-6
    o.close()


def lion_reference(p, grads, lr, b1, b2, wd):
    """Lion in float64, Algorithm 2 of Chen et al. (2023)."""
    p = p.astype(np.float64)
    m = np.zeros_like(p)
    for g in grads:
        g = g.astype(np.float64)
        p = p * (1 - lr * wd)
        p = p - lr * np.sign(b1 * m + (1 - b1) * g)
        m = b2 * m + (1 - b2) * g
    return p, m


@pytest.mark.parametrize("fmt", ["fp32", "bf16-moments", "int8-moments"])
def test_lion_against_a_float64_loop_of_the_paper(tmp_path, fmt):
    torch.manual_seed(3)
    w = torch.nn.Parameter(torch.randn(4096))
    start = w.detach().clone().numpy()
    grads = [torch.randn(4096) for _ in range(12)]
    o = mt.Lion([w], lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1,
                store=str(tmp_path / "s"), state_format=fmt)
    for g in grads:
        w.grad = g.clone()
        o.step()
    p, m = lion_reference(start, [g.numpy() for g in grads], 1e-3, 0.9,
                          0.99, 0.1)
    got = w.detach().numpy()
    if fmt == "fp32":
        assert np.abs(got - p).max() < 1e-5
        assert np.abs(o.state[w]["exp_avg"].numpy() - m).max() < 1e-6
    else:
        # Compact moments round m: a sign can flip where b1*m + (1-b1)*g is
        # near 0, moving that element by 2 lr once; most stay exact.
        moved = np.abs(got - p) > 1e-5
        assert moved.mean() < 0.05, moved.mean()
    assert set(o.state[w]) == {"exp_avg"}
    o.close()


def test_each_rule_keeps_only_its_own_state(tmp_path):
    """A store holds the slots its rule needs and no more: Lion one moment
    (8 bytes a parameter with the master, Adam's 12), SGD without momentum
    none, amsgrad a third (mlpo-bench step --optimizer shows the bytes)."""
    want = {mt.Lion: ("lion", ["exp_avg"]),
            mt.AdamW: ("adam", ["exp_avg", "exp_avg_sq"]),
            mt.SGD: ("sgd", []),
            mt.Adagrad: ("adagrad", ["sum"]),
            mt.Adamax: ("adamax", ["exp_avg", "exp_inf"])}
    for cls, (rule, names) in want.items():
        m = make_model()
        o = cls(m.parameters(), lr=1e-3, store=str(tmp_path / cls.__name__))
        train(m, o, 1)
        assert o._engine.rule == rule
        assert [t for _, t, _ in o._engine.slots] == names
        o.close()
    o = mt.AdamW(make_model().parameters(), amsgrad=True,
                 store=str(tmp_path / "ams"))
    assert o._engine.rule == "adam+amsgrad"
    o.close()


def test_amsgrad_needs_its_state_from_the_start(tmp_path):
    """A store created without amsgrad holds no max_exp_avg_sq: amsgrad
    turned on later (a param_groups edit, add_param_group, a loaded dict)
    is a ValueError that changes nothing; one created with it keeps the
    maximum while the option is off, as torch keeps max_exp_avg_sq."""
    m = make_model()
    o = mt.AdamW(m.parameters(), lr=1e-2, store=str(tmp_path / "s"))
    train(m, o, 2)
    before = [p.detach().clone() for p in m.parameters()]
    o.param_groups[0]["amsgrad"] = True
    with pytest.raises(ValueError, match="max_exp_avg_sq"):
        o.step()
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))
    assert o._engine.step_count == 2
    o.param_groups[0]["amsgrad"] = False
    with pytest.raises(ValueError, match="amsgrad"):
        o.add_param_group({"params": [torch.nn.Parameter(torch.ones(3))],
                           "amsgrad": True})
    r = make_model()
    ro = torch.optim.AdamW(r.parameters(), lr=1e-2, amsgrad=True)
    train(r, ro, 2)
    with pytest.raises(ValueError, match="max_exp_avg_sq"):
        o.load_state_dict(ro.state_dict())
    assert o._engine.step_count == 2
    o.close()
    # Created with amsgrad: off for a while, then on, as torch.
    m, r = make_model(), make_model()
    o = mt.AdamW(m.parameters(), lr=1e-2, amsgrad=True,
                 store=str(tmp_path / "t"))
    ro = torch.optim.AdamW(r.parameters(), lr=1e-2, amsgrad=True)
    for flag in (True, False, True):
        o.param_groups[0]["amsgrad"] = ro.param_groups[0]["amsgrad"] = flag
        train(m, o, 3)
        train(r, ro, 3)
    assert max_diff(m, r) < 2e-6
    o.close()


def test_a_store_keeps_its_rule(tmp_path):
    m = make_model()
    o = mt.Lion(m.parameters(), store=str(tmp_path / "s"))
    train(m, o, 1)
    o.close()
    with pytest.raises(RuntimeError, match="update rule lion, not adam"):
        mt.AdamW(m.parameters(), store=str(tmp_path / "s"), resume=True)
    o = mt.SGD(m.parameters(), lr=0.1, store=str(tmp_path / "g"))
    train(m, o, 1)
    o.param_groups[0]["momentum"] = 0.9
    with pytest.raises(ValueError, match="momentum buffer"):
        o.step()
    o.close()
    with pytest.raises(ValueError, match="Nesterov momentum requires"):
        mt.SGD(m.parameters(), lr=0.1, nesterov=True,
               store=str(tmp_path / "h"))
    with pytest.raises(ValueError, match="invalid lr_decay"):
        mt.Adagrad(m.parameters(), lr_decay=-1, store=str(tmp_path / "h"))
    with pytest.raises(ValueError, match="invalid betas"):
        mt.Lion(m.parameters(), betas=(0.9, 1.5), store=str(tmp_path / "h"))
    with pytest.raises(ValueError, match="differentiable"):
        mt.SGD(m.parameters(), differentiable=True, store=str(tmp_path / "h"))


class Odd(torch.nn.Module):
    """Parameters torch.optim takes that the engine cannot read in place."""

    def __init__(self, dtype):
        super().__init__()
        torch.manual_seed(5)
        self.d = torch.nn.Parameter(torch.randn(6, 4, dtype=torch.float64))
        self.c = torch.nn.Parameter(torch.randn(5, dtype=torch.complex64))
        base = torch.randn(8, 6)
        self.g = torch.nn.Parameter(base[:, ::2])  # gaps: stride (6, 2)
        self.dtype = dtype

    def loss(self, step):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(step),
                        dtype=torch.float64)
        a = (x @ self.d.T).pow(2).mean()
        b = (self.c * (1 + 1j * step)).abs().pow(2).sum()
        c = self.g.pow(3).mean()
        return a + b.to(torch.float64) + c.to(torch.float64)


@pytest.mark.parametrize("ours, theirs, kw", [
    (mt.AdamW, torch.optim.AdamW, dict(lr=1e-2)),
    (mt.SGD, torch.optim.SGD, dict(lr=1e-2, momentum=0.9)),
])
def test_float64_complex_and_gapped_parameters(tmp_path, ours, theirs, kw):
    """float64 optimized in fp32 (the documented choice), complex as its
    real view, a parameter with gaps through a contiguous copy: each ends
    where torch.optim takes it, within fp32 rounding."""
    m, r = Odd(None), Odd(None)
    assert not m.g.is_contiguous()
    o = ours(m.parameters(), store=str(tmp_path / "s"), **kw)
    ro = theirs(r.parameters(), **kw)
    for s in range(8):
        for mod, opt in ((m, o), (r, ro)):
            opt.zero_grad()
            mod.loss(s).backward()
            opt.step()
    for (n, p), q in zip(m.named_parameters(), r.parameters()):
        assert p.dtype == q.dtype and p.stride() == q.stride(), n
        assert torch.allclose(p, q, atol=1e-5), (n, (p - q).abs().max())
    st = o.state[m.c]  # complex: the real view's state
    assert st[next(iter(k for k in st if k != "step"))].shape == (5, 2)
    # A checkpoint and a restore give the model's tensors back in place.
    sd = o.state_dict()
    want = [p.detach().clone() for p in m.parameters()]
    o.zero_grad()
    m.loss(99).backward()
    o.step()
    o.load_state_dict(sd)
    for p, w in zip(m.parameters(), want):
        assert torch.allclose(p, w, atol=1e-6)
    o.close()


def test_sgd_momentum_switched_off_and_on_keeps_its_buffer(tmp_path):
    """SGD's momentum 0.9, then 0 for some steps, then 0.9 again (a
    schedule on momentum): torch.optim leaves momentum_buffer alone while
    momentum is 0 and goes on from it; so does mlpo."""
    m, r = make_model(), make_model()
    kw = dict(lr=0.05, momentum=0.9, dampening=0.2, weight_decay=1e-2)
    o = mt.SGD(m.parameters(), **kw, store=str(tmp_path / "s"))
    ro = torch.optim.SGD(r.parameters(), **kw)
    for s in range(9):
        mom = 0.0 if 3 <= s < 6 else 0.9
        for opt in (o, ro):
            for g in opt.param_groups:
                g["momentum"] = mom
        train(m, o, 1, start=s)
        train(r, ro, 1, start=s)
        assert max_diff(m, r) < 2e-6, s
    for p, q in zip(m.parameters(), r.parameters()):
        assert torch.allclose(o.state[p]["momentum_buffer"],
                              ro.state[q]["momentum_buffer"], atol=2e-6)
    o.close()
