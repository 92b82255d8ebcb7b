"""Randomised fuzzing of load_state_dict (there is no Python fuzzer among
Debian's packages): valid state dicts of both kinds (mlpo's own and a plain
torch.optim one) are mutated at random — keys deleted, values replaced by
other types, tensors reshaped, retyped or poisoned with nan — and loaded.
Each load either succeeds or raises ValueError/TypeError naming the problem;
after a refused load the model, the step count and the store are exactly
as before; and at the end the valid dict still loads and training goes on
bit-identical to a run that never saw the bad ones.

MLPO_FUZZ_CASES=N (default 120 per kind) runs longer."""
import copy
import os
import random
import shutil

import pytest
import torch

import mlpo.torch as mt
from mlpo._dict_checks import _check_hyper
from helpers import make_model, two_groups, loss_of

CASES = int(os.environ.get("MLPO_FUZZ_CASES", "120"))

POOL = [None, "x", -1, 0, 2**70, 1e308, float("nan"), float("inf"), True,
        [], {}, (1,), torch.tensor([1.0, 2.0]), torch.zeros(3, dtype=torch.int64),
        torch.tensor(float("nan"))]


def paths(obj, prefix=()):
    """Every (path, value) inside nested dicts/lists/tuples."""
    yield prefix, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from paths(v, prefix + (i,))


def mutate(sd, rng):
    sd = copy.deepcopy(sd)
    for _ in range(rng.randint(1, 3)):
        all_paths = [p for p, _ in paths(sd) if p]
        path = rng.choice(all_paths)
        parent = sd
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        old = parent[key]
        if isinstance(parent, tuple):
            continue  # immutable (betas): its group gets replaced instead
        op = rng.randrange(5)
        if op == 0 and isinstance(parent, dict):
            del parent[key]
        elif op == 1 and isinstance(old, torch.Tensor) and old.numel() > 1:
            parent[key] = old.reshape(-1)[:-1].clone()  # wrong shape
        elif op == 2 and isinstance(old, torch.Tensor):
            parent[key] = old.to(rng.choice([torch.int32, torch.float16]))
        elif op == 3 and isinstance(old, torch.Tensor) and \
                old.is_floating_point() and old.numel() > 0:
            bad = old.clone()
            bad.reshape(-1)[rng.randrange(bad.numel())] = rng.choice(
                [float("nan"), float("inf"), -1.0])
            parent[key] = bad
        else:
            parent[key] = copy.deepcopy(rng.choice(POOL))
    return sd


def snapshot(model, opt):
    return ([p.detach().clone() for p in model.parameters()], opt.step_count,
            sorted(opt.tags()))


def train(model, opt, first, n):
    for step in range(first, first + n):
        opt.zero_grad()
        loss_of(model, step).backward()
        opt.step()


def make_valid(kind, tmp_path):
    """(state dict, the model it was taken from) of the given kind."""
    model = make_model()
    if kind == "torch":
        ref = torch.optim.AdamW(two_groups(model), lr=3e-3)
        train(model, ref, 0, 3)
        return ref.state_dict(), model
    opt = mt.AdamW(two_groups(model, named=True), lr=3e-3,
                   store=str(tmp_path / "s"))
    train(model, opt, 0, 3)
    return opt.state_dict(), model, opt


@pytest.mark.parametrize("kind", ["mlpo", "torch"])
def test_mutated_state_dicts_are_refused_cleanly(kind, tmp_path):
    made = make_valid(kind, tmp_path)
    valid, src_model = made[0], made[1]
    def fresh(old=None):
        # One store at a time (each preallocates its segment files).
        if old is not None:
            old.close()
            shutil.rmtree(tmp_path / "t")
        m = copy.deepcopy(src_model)
        return m, mt.AdamW(two_groups(m, named=True), lr=3e-3,
                           store=str(tmp_path / "t"))

    if kind == "mlpo":
        model, opt = src_model, made[2]  # the store that wrote the dict
    else:
        model, opt = fresh()
    rng = random.Random(1234 if kind == "mlpo" else 4321)
    refused = accepted = 0
    for case in range(CASES):
        bad = mutate(valid, rng)
        before = snapshot(model, opt)
        try:
            opt.load_state_dict(bad)
        except (ValueError, TypeError, KeyError) as e:
            refused += 1
            assert str(e), f"case {case}: an error without a message"
            after = snapshot(model, opt)
            for p, q in zip(before[0], after[0]):
                assert torch.equal(p, q), f"case {case}: model changed ({e})"
            assert after[1:] == before[1:], f"case {case}: store changed ({e})"
            continue
        # A mutation that kept the dict valid (a value replaced by another
        # valid one, a key torch does not read): what it set must be sane.
        accepted += 1
        for g, group in enumerate(opt.param_groups):
            _check_hyper(group, g, opt._mode)
        for p in model.parameters():
            assert bool(torch.isfinite(p).all()), f"case {case}"
        if kind == "torch":
            model, opt = fresh(opt)  # imported: the next starts clean
    print(f"{kind}: {refused} refused, {accepted} accepted of {CASES}")
    assert refused > CASES // 2, (refused, accepted)
    # The valid dict loads, and training continues exactly as in a run that
    # loaded it without the bad ones in between.
    opt.load_state_dict(valid)
    twin_model = copy.deepcopy(model)
    twin = mt.AdamW(two_groups(twin_model, named=True), lr=3e-3,
                    store=str(tmp_path / "twin"))
    twin.load_state_dict(valid if kind == "torch"
                         else mt.export_state_dict(valid))
    train(model, opt, 10, 3)
    train(twin_model, twin, 10, 3)
    for p, q in zip(model.parameters(), twin_model.parameters()):
        assert torch.equal(p, q)
