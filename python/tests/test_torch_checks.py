"""The project's own version of torch.optim's optimizer checks, in our
words: each case (an optimizer's options, per group, with an LR schedule)
runs through mlpo.torch and torch.optim side by side on one model and
data and must end at the same parameters and state; a state dict taken
half-way loads into a fresh optimizer of each kind and training goes on
alike. Options torch takes that mlpo refuses are listed in REFUSED with
the reason the user guide gives, and each is checked to be a ValueError
that changes nothing: no case is silent."""
import copy

import pytest
import torch

import mlpo.torch as mt
from helpers import loss_of, make_model, max_diff

PAIRS = {"SGD": (mt.SGD, torch.optim.SGD),
         "Adagrad": (mt.Adagrad, torch.optim.Adagrad),
         "Adam": (mt.Adam, torch.optim.Adam),
         "AdamW": (mt.AdamW, torch.optim.AdamW)}

# (optimizer, constructor options, options of the second group)
CASES = [
    ("SGD", dict(lr=0.05), {}),
    ("SGD", dict(lr=0.05, momentum=0.9), dict(lr=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.5), {}),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True),
     dict(weight_decay=0.1)),
    ("SGD", dict(lr=0.05, weight_decay=0.01, maximize=True), {}),
    ("SGD", dict(lr=torch.tensor(0.05), momentum=0.5), {}),
    ("Adagrad", dict(), {}),
    ("Adagrad", dict(lr=0.1, weight_decay=0.1), dict(lr=0.01)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.5), {}),
    ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.1, eps=1e-5), {}),
    ("Adagrad", dict(lr=0.1, maximize=True), dict(weight_decay=0.01)),
    ("Adam", dict(lr=1e-2), {}),
    ("Adam", dict(lr=1e-2, weight_decay=0.1), dict(lr=1e-3)),
    ("Adam", dict(lr=1e-2, amsgrad=True), dict(amsgrad=False)),
    ("Adam", dict(lr=1e-2, maximize=True, amsgrad=True), {}),
    ("Adam", dict(lr=1e-2, betas=(0.8, 0.9), eps=1e-6), {}),
    ("Adam", dict(lr=1e-2, foreach=True), dict(fused=False)),
    ("AdamW", dict(lr=1e-2), dict(weight_decay=0.0)),
    ("AdamW", dict(lr=1e-2, amsgrad=True, weight_decay=0.1), {}),
    ("AdamW", dict(lr=torch.tensor(1e-2), maximize=True), {}),
    ("AdamW", dict(lr=1e-2, betas=(0.0, 0.5)), dict(betas=(0.9, 0.99))),
]


def _sched_none(o):
    return None


SCHEDULES = {
    "none": _sched_none,
    "step": lambda o: torch.optim.lr_scheduler.StepLR(o, 2, gamma=0.5),
    "cosine": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 6),
    "lambda": lambda o: torch.optim.lr_scheduler.LambdaLR(
        o, lambda s: 1 / (1 + s)),
    "linear+exp": lambda o: torch.optim.lr_scheduler.ChainedScheduler([
        torch.optim.lr_scheduler.LinearLR(o, 0.5, total_iters=3),
        torch.optim.lr_scheduler.ExponentialLR(o, 0.9)]),
}


def groups(model, extra):
    return [{"params": list(model[0].parameters())},
            {"params": list(model[2].parameters()), **extra}]


def run(case, schedule, tmp_path, steps=6):
    name, kw, extra = case
    ours, theirs = PAIRS[name]
    m, r = make_model(), make_model()
    o = ours(groups(m, extra), store=str(tmp_path / "s"), **copy.deepcopy(kw))
    ro = theirs(groups(r, extra), **copy.deepcopy(kw))
    so, sr = SCHEDULES[schedule](o), SCHEDULES[schedule](ro)
    for s in range(steps):
        for mod, opt, sch in ((m, o, so), (r, ro, sr)):
            opt.zero_grad()
            loss_of(mod, s).backward()
            opt.step()
            if sch is not None:
                sch.step()
    return m, o, r, ro


def case_id(c):
    return f"{c[0]}-" + "-".join(
        f"{k}={v if not isinstance(v, torch.Tensor) else 'tensor'}"
        for k, v in {**c[1], **{"g1." + k: v for k, v in c[2].items()}}
        .items()) or c[0]


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_case_as_torch(tmp_path, case, schedule):
    m, o, r, ro = run(case, schedule, tmp_path)
    assert max_diff(m, r) < 3e-6
    for g, rg in zip(o.param_groups, ro.param_groups):
        assert float(g["lr"]) == pytest.approx(float(rg["lr"]))
    for p, q in zip(m.parameters(), r.parameters()):
        mine, want = o.state[p], ro.state[q]
        want = {k: v for k, v in want.items() if v is not None}
        assert set(mine) == set(want), (set(mine), set(want))
        for k, v in want.items():
            assert torch.allclose(torch.as_tensor(mine[k]).float(),
                                  torch.as_tensor(v).float(), atol=3e-6), k
    o.close()


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_state_dict_round_trip_as_torch(tmp_path, case):
    """Half-way: mlpo's dict into a new mlpo optimizer, its export into a
    new torch.optim one, and torch's into mlpo; all three go on alike."""
    name, kw, extra = case
    ours, theirs = PAIRS[name]
    m, o, r, ro = run(case, "none", tmp_path, steps=3)
    sd_mlpo, sd_torch = o.state_dict(), ro.state_dict()
    exported = mt.export_state_dict(sd_mlpo)
    o.close()
    runs = []
    for k, (cls, sd) in enumerate(((ours, sd_mlpo), (theirs, exported),
                                   (ours, sd_torch))):
        mod = make_model()
        mod.load_state_dict(m.state_dict())
        kwargs = dict(store=str(tmp_path / "s")) if k == 0 else \
            dict(store=str(tmp_path / f"n{k}")) if cls is ours else {}
        opt = cls(groups(mod, extra), **copy.deepcopy(kw), **kwargs)
        opt.load_state_dict(sd)
        runs.append((mod, opt))
    for s in range(3, 6):
        for mod, opt in runs + [(r, ro)]:
            opt.zero_grad()
            loss_of(mod, s).backward()
            opt.step()
    for mod, _ in runs:
        assert max_diff(mod, r) < 3e-6
    for _, opt in runs:
        if hasattr(opt, "close"):
            opt.close()


# What mlpo refuses that torch takes, with the reason (docs/user-guide.md).
REFUSED = [
    ("AdamW", dict(capturable=True),
     "capturable=True is for capturing the step in a CUDA graph"),
    ("Adam", dict(differentiable=True), "differentiable=True is autograd"),
    ("SGD", dict(differentiable=True), "differentiable=True is autograd"),
    ("Adagrad", dict(differentiable=True), "differentiable=True is autograd"),
]


@pytest.mark.parametrize("name, kw, says", REFUSED,
                         ids=[f"{n}-{next(iter(k))}" for n, k, _ in REFUSED])
def test_refusals_name_their_reason_and_change_nothing(tmp_path, name, kw,
                                                       says):
    ours, theirs = PAIRS[name]
    theirs(make_model().parameters(), **kw)  # torch takes it
    m = make_model()
    before = [p.detach().clone() for p in m.parameters()]
    with pytest.raises(ValueError, match=says):
        ours(m.parameters(), store=str(tmp_path / "s"), **kw)
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))
    assert not (tmp_path / "s").exists() or not any(
        (tmp_path / "s").iterdir())


def test_fsdp1_flat_parameters_are_refused_before_anything_is_made(
        tmp_path):
    """FSDP1 (FullyShardedDataParallel; Lightning's FSDPStrategy) hands the
    optimizer one flat shard per rank; mlpo took it as a replicated tensor
    and would have sharded it again. (FSDP1 needs an accelerator, so the
    flat parameter is made by hand here.)"""
    flat_param = pytest.importorskip(
        "torch.distributed.fsdp._flat_param").FlatParameter
    fp = flat_param(torch.zeros(64), requires_grad=True)
    plain = torch.nn.Parameter(torch.zeros(8))
    for params in ([fp], [plain, fp], [{"params": [plain]},
                                       {"params": [fp], "lr": 0.1}]):
        with pytest.raises(ValueError, match="FSDP1's flat parameter.*"
                           "fully_shard"):
            mt.AdamW(params, store=str(tmp_path / "s"))
    assert not (tmp_path / "s").exists()  # nothing was made


@pytest.mark.parametrize("name", ["AdamW", "Adam", "Lion", "Adagrad", "SGD",
                                  "Adamax"])
def test_an_unknown_keyword_names_the_class_as_torch_does(tmp_path, name):
    """A keyword the class does not take (amsgrad for Adamax, a typo) is
    the TypeError Python gives, naming the class called, as torch.optim's
    (it named mlpo's base class); nothing is made."""
    model = make_model()
    with pytest.raises(TypeError) as theirs:
        getattr(torch.optim, name, torch.optim.AdamW)(
            model.parameters(), lr_typo=1e-3)
    with pytest.raises(TypeError) as ours:
        getattr(mt, name)(model.parameters(), lr_typo=1e-3,
                          store=str(tmp_path / "s"))
    assert f"{name}.__init__() got an unexpected keyword argument " \
           "'lr_typo'" == str(ours.value)
    if hasattr(torch.optim, name):
        assert str(ours.value) == str(theirs.value)
    assert not (tmp_path / "s").exists()
