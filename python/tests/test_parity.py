"""mlpo.torch.AdamW / Adam against torch.optim's own on the same model and
data: two parameter groups, weight decay, an lr schedule, 50 steps."""
import copy

import pytest
import torch

import mlpo.torch as mt
from helpers import make_model, two_groups, loss_of, max_diff


def run_pair(opt_cls, ref_cls, store, steps=50, **kw):
    model = make_model()
    ref = copy.deepcopy(model)
    opt = opt_cls(two_groups(model, named=True), lr=3e-3, store=store, **kw)
    ropt = ref_cls(two_groups(ref), lr=3e-3, **kw)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + 0.05 * s))
    rsched = torch.optim.lr_scheduler.LambdaLR(ropt, lambda s: 1.0 / (1 + 0.05 * s))
    worst = 0.0
    for step in range(steps):
        for m, o, s in ((model, opt, sched), (ref, ropt, rsched)):
            o.zero_grad(set_to_none=True)
            loss_of(m, step).backward()
            o.step()
            s.step()
        worst = max(worst, max_diff(model, ref))
    return model, ref, opt, ropt, worst


@pytest.mark.parametrize("kind", ["AdamW", "Adam"])
def test_fp32_parity_with_torch_optim(kind, store_dir):
    kw = {"weight_decay": 0.01} if kind == "Adam" else {}
    model, ref, opt, ropt, worst = run_pair(
        getattr(mt, kind), getattr(torch.optim, kind), store_dir, **kw)
    # Debian's torch 1.13 computes m as mul_(b1).add_(g, 1-b1) with FMA in its
    # vector path; mlpo follows torch >= 2.0 (lerp, no FMA). The difference
    # stays at the level of float rounding.
    assert worst <= 1e-6, worst
    assert opt.step_count == 50
    assert opt.param_groups[0]["lr"] == ropt.param_groups[0]["lr"]
    # The moments too, read back from the store by name.
    sd = mt.export_state_dict(opt.state_dict())
    rsd = ropt.state_dict()
    for i in rsd["state"]:
        for k in ("exp_avg", "exp_avg_sq"):
            d = (sd["state"][i][k] - rsd["state"][i][k]).abs().max().item()
            assert d <= 1e-6, (i, k, d)
        assert float(sd["state"][i]["step"]) == 50


def test_bf16_model_matches_fp32_master_reference_within_bf16_rounding(store_dir):
    model = make_model(dtype=torch.bfloat16)
    master = [p.detach().float().clone().requires_grad_(True)
              for p in model.parameters()]
    opt = mt.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05,
                   store=store_dir)
    ref = torch.optim.AdamW(master, lr=1e-2, weight_decay=0.05)
    for step in range(20):
        opt.zero_grad()
        loss_of(model, step, dtype=torch.bfloat16).backward()
        for mp, p in zip(master, model.parameters()):
            mp.grad = p.grad.float()  # the same bf16 gradients, widened
        opt.step()
        ref.step()
        for mp, p in zip(master, model.parameters()):
            assert p.dtype == torch.bfloat16
            want = mp.detach().to(torch.bfloat16).float()
            got = p.detach().float()
            # at most one bf16 rounding step apart (8 bits of mantissa)
            tol = want.abs() * 2 ** -7 + 1e-30
            assert ((got - want).abs() <= tol).all(), step


def test_overflow_skips_the_step_and_clipping_applies(store_dir):
    model = make_model()
    ref = copy.deepcopy(model)
    opt = mt.AdamW(model.parameters(), lr=1e-2, store=store_dir,
                   max_grad_norm=0.5)
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    before = [p.detach().clone() for p in model.parameters()]
    loss_of(model, 0).backward()
    next(model.parameters()).grad[0, 0] = float("inf")
    opt.step()
    assert opt.last_report["skipped"]
    assert opt.skipped_steps == 1 and opt.step_count == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    for m, o in ((model, opt), (ref, ropt)):
        o.zero_grad()
        loss_of(m, 1).backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
    opt.step()
    ropt.step()
    assert max_diff(model, ref) <= 1e-6


def test_dram_tier_changes_nothing_but_reads(tmp_path):
    """store={"cache": "50%"}: the same numbers as torch.optim, and the
    DRAM tier serves part of every step after the first."""
    store = {"path": [str(tmp_path / "nvme"), str(tmp_path / "pfs")],
             "cache": "50%"}
    model = make_model()
    ref = copy.deepcopy(model)
    opt = mt.AdamW(model.parameters(), lr=3e-3, store=store,
                   subgroup_numel=64)
    ropt = torch.optim.AdamW(ref.parameters(), lr=3e-3)
    worst, hits = 0.0, 0
    for step in range(12):
        for m, o in ((model, opt), (ref, ropt)):
            o.zero_grad(set_to_none=True)
            loss_of(m, step).backward()
            o.step()
        worst = max(worst, max_diff(model, ref))
        if step > 0:
            hits += opt.last_report["cache_hit_bytes"]
    assert worst <= 1e-6, worst
    assert hits > 0, opt.last_report


def test_bad_cache_budget_is_a_clear_error(tmp_path):
    model = make_model()
    with pytest.raises(Exception, match="cache"):
        mt.AdamW(model.parameters(),
                 store={"path": [str(tmp_path / "a")], "cache": "150%"})
