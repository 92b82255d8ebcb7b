"""torch 2.x's optimizer contract, checked on mlpo.torch.AdamW beside
torch.optim.AdamW: the base class, step hooks (per optimizer and global),
state-dict and load-state-dict hooks, the LR schedulers of 2.x (which wrap
step), the param_names 2.x state dicts carry, zero_grad()'s default, and a
torch.compile'd model with the optimizer outside it."""
import warnings

import pytest
import torch

from torch.optim.optimizer import register_optimizer_step_post_hook

import mlpo.torch as mt
from helpers import batch, make_model, max_diff, two_groups

TOL = 1e-6


def pair(tmp_path, groups=two_groups, **kw):
    model, ref = make_model(), make_model()
    opt = mt.AdamW(groups(model), lr=1e-2, store=str(tmp_path / "s"), **kw)
    ropt = torch.optim.AdamW(groups(ref), lr=1e-2)
    return model, opt, ref, ropt


def train_step(model, opt, step):
    x, y = batch(step)
    opt.zero_grad()
    ((model(x) - y) ** 2).mean().backward()
    opt.step()


def test_is_a_torch_optimizer(tmp_path):
    model, opt, _, _ = pair(tmp_path)
    assert isinstance(opt, torch.optim.Optimizer)
    assert isinstance(opt, torch.optim.AdamW) is False  # its own class


def test_step_hooks_run_as_in_torch(tmp_path):
    model, opt, ref, ropt = pair(tmp_path)
    seen = {"mine": [], "theirs": []}
    for o, who in ((opt, "mine"), (ropt, "theirs")):
        o.register_step_pre_hook(
            lambda o, a, k, who=who: seen[who].append(("pre", o.step_count
                                                       if who == "mine"
                                                       else None)))
        o.register_step_post_hook(
            lambda o, a, k, who=who: seen[who].append(("post", None)))
    glob = []
    handle = register_optimizer_step_post_hook(
        lambda o, a, k: glob.append(type(o).__name__))
    try:
        for s in range(3):
            train_step(model, opt, s)
            train_step(ref, ropt, s)
    finally:
        handle.remove()
    assert [k for k, _ in seen["mine"]] == [k for k, _ in seen["theirs"]]
    # The pre hook ran before the step: it saw the counts 0, 1, 2.
    assert [c for k, c in seen["mine"] if k == "pre"] == [0, 1, 2]
    assert glob == ["AdamW"] * 6
    assert max_diff(model, ref) <= TOL
    # A pre hook that hands back other arguments is obeyed (here: a
    # closure, which step() calls and whose loss it returns).
    called = []
    opt.register_step_pre_hook(lambda o, a, k: (a, {**k, "closure": lambda: (
        called.append(1), torch.tensor(7.0))[1]}))
    assert float(opt.step()) == 7.0 and called == [1]


def test_state_dict_hooks_run_as_in_torch(tmp_path):
    model, opt, ref, ropt = pair(tmp_path)
    train_step(model, opt, 0)
    calls = []
    opt.register_state_dict_pre_hook(lambda o: calls.append("pre"))
    opt.register_state_dict_post_hook(
        lambda o, sd: {**sd, "note": "added by a hook"})
    sd = opt.state_dict()
    assert sd["note"] == "added by a hook" and calls == ["pre"]
    train_step(model, opt, 1)
    opt.register_load_state_dict_pre_hook(
        lambda o, sd: calls.append(("load-pre", sd["note"])))
    opt.register_load_state_dict_post_hook(
        lambda o: calls.append(("load-post", o.step_count)))
    opt.load_state_dict(sd)
    assert calls[1:] == [("load-pre", "added by a hook"), ("load-post", 1)]
    # A load pre hook may hand back another dict, as torch allows.
    train_step(model, opt, 1)
    older = opt.state_dict()
    opt.register_load_state_dict_pre_hook(lambda o, d: older)
    train_step(model, opt, 2)
    opt.load_state_dict(sd)  # the hook swaps in `older`: step 2
    assert opt.step_count == 2


@pytest.mark.parametrize("make_sched", [
    lambda o: torch.optim.lr_scheduler.LinearLR(o, 0.1, total_iters=4),
    lambda o: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 3),
    lambda o: torch.optim.lr_scheduler.OneCycleLR(o, 2e-2, total_steps=8),
    lambda o: torch.optim.lr_scheduler.SequentialLR(o, [
        torch.optim.lr_scheduler.ConstantLR(o, 0.5, total_iters=3),
        torch.optim.lr_scheduler.ExponentialLR(o, 0.8)], milestones=[3]),
    lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(o, patience=0),
], ids=["linear", "cosine-restarts", "one-cycle", "sequential", "plateau"])
def test_lr_schedulers_of_torch_2(tmp_path, make_sched):
    """2.x schedulers wrap opt.step to count calls; OneCycleLR also cycles
    betas[0] in every group. No 'step() before optimizer.step()' warning,
    and the run is torch's."""
    model, opt, ref, ropt = pair(tmp_path)
    scheds = make_sched(opt), make_sched(ropt)
    with warnings.catch_warnings():
        # torch's order warning ("Detected call of `lr_scheduler.step()`
        # before `optimizer.step()`") would raise; torch's own others not.
        warnings.filterwarnings("error", message=".*before .optimizer")
        for s in range(8):
            for m, o, sch in ((model, opt, scheds[0]),
                              (ref, ropt, scheds[1])):
                train_step(m, o, s)
                if isinstance(sch, torch.optim.lr_scheduler.ReduceLROnPlateau):
                    sch.step(1.0)  # no improvement: the lr falls
                else:
                    sch.step()
    assert [g["lr"] for g in opt.param_groups] == \
        [g["lr"] for g in ropt.param_groups]
    assert [g["betas"] for g in opt.param_groups] == \
        [tuple(g["betas"]) for g in ropt.param_groups]
    assert max_diff(model, ref) <= TOL
    # The scheduler's own state dict round-trips with the optimizer's.
    sched2 = make_sched(opt)
    sched2.load_state_dict(scheds[0].state_dict())


def test_param_names_as_torch_2_carries_them(tmp_path):
    model, opt, ref, ropt = pair(
        tmp_path, groups=lambda m: two_groups(m, named=True))
    train_step(model, opt, 0)
    train_step(ref, ropt, 0)
    mine, theirs = opt.state_dict(), ropt.state_dict()
    assert [g["param_names"] for g in mine["param_groups"]] == \
        [g["param_names"] for g in theirs["param_groups"]] == \
        [["0.weight", "2.weight"], ["0.bias", "2.bias"]]
    # torch's dict, with its names, imports into a new mlpo optimizer.
    fresh = mt.AdamW(two_groups(ref, named=True), lr=1e-2,
                     store=str(tmp_path / "s2"))
    fresh.load_state_dict(theirs)
    assert fresh.param_groups[0]["param_names"] == ["0.weight", "2.weight"]
    # Named and unnamed parameters in one group: torch's own error.
    with pytest.raises(ValueError, match="with/without names"):
        mt.AdamW([("w", model[0].weight), model[0].bias],
                 store=str(tmp_path / "s3"))


def test_zero_grad_sets_none_by_default(tmp_path):
    model, opt, _, _ = pair(tmp_path)
    train_step(model, opt, 0)
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    ((model(batch(1)[0])) ** 2).mean().backward()
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any()
               for p in model.parameters())


def test_a_compiled_model_with_the_optimizer_outside(tmp_path):
    """torch.compile(model): its parameters are the module's own, and the
    optimizer outside the compiled graph updates them as torch's does."""
    model, opt, ref, ropt = pair(tmp_path)
    cm = torch.compile(model, backend="aot_eager")
    cref = torch.compile(ref, backend="aot_eager")
    for s in range(4):
        train_step(cm, opt, s)
        train_step(cref, ropt, s)
    assert max_diff(model, ref) <= TOL
    # The inductor backend (generated C++ kernels), one step each.
    for m, o in ((model, opt), (ref, ropt)):
        train_step(torch.compile(m), o, 4)
    assert max_diff(model, ref) <= TOL


def test_del_and_with_release_the_store_at_once(tmp_path):
    """`del opt` closes the store then and there (opt.state referred back
    to the optimizer, so only the garbage collector released it), and the
    with-form closes it at the block's end: the next optimizer opens the
    same namespace, not a second one beside a held store."""
    import gc
    gc.disable()  # no collector to hide a cycle
    try:
        model = make_model()
        opt = mt.AdamW(model.parameters(), store=str(tmp_path / "s"))
        train_step(model, opt, 0)
        opt.state[model[0].weight]  # the view is in use
        del opt
        with mt.AdamW(model.parameters(), store=str(tmp_path / "s"),
                      resume=True) as opt:
            assert opt.store_name == "mlpo" and opt.step_count == 1
            train_step(model, opt, 1)
        with pytest.raises(RuntimeError, match="closed"):
            opt.step()
        again = mt.AdamW(model.parameters(), store=str(tmp_path / "s"),
                         resume=True)
        assert again.store_name == "mlpo" and again.step_count == 2
    finally:
        gc.enable()


def test_maximize_as_torch_wherever_it_is_set(tmp_path):
    """maximize=True ascends the objective, per group: set in the
    constructor, in one group's dict, by editing param_groups between
    steps, and carried by a loaded torch.optim dict; each run is torch's
    (it was accepted in a group and ignored: trained the wrong way)."""
    def groups(m, flag):
        return [{"params": m[0].parameters(), "maximize": flag},
                {"params": m[2].parameters()}]
    model, ref = make_model(), make_model()
    opt = mt.AdamW(groups(model, True), lr=1e-2, store=str(tmp_path / "a"))
    ropt = torch.optim.AdamW(groups(ref, True), lr=1e-2)
    for s in range(3):
        train_step(model, opt, s)
        train_step(ref, ropt, s)
    assert max_diff(model, ref) <= TOL
    for o in (opt, ropt):  # an edit between steps: both groups ascend
        o.param_groups[1]["maximize"] = True
    for s in range(3, 6):
        train_step(model, opt, s)
        train_step(ref, ropt, s)
    assert max_diff(model, ref) <= TOL
    # torch's dict (maximize in its groups) into a fresh mlpo optimizer:
    # the groups say True and the next steps ascend as torch's do.
    fresh = mt.AdamW(groups(model, False), lr=1e-2,
                     store=str(tmp_path / "b"))
    fresh.load_state_dict(ropt.state_dict())
    assert [g["maximize"] for g in fresh.param_groups] == [True, True]
    for s in range(6, 8):
        train_step(model, fresh, s)
        train_step(ref, ropt, s)
    assert max_diff(model, ref) <= TOL
    # mlpo's own dict carries it too, through export_state_dict.
    exp = mt.export_state_dict(fresh.state_dict())
    assert [g["maximize"] for g in exp["param_groups"]] == [True, True]
    # The constructor's keyword.
    m2, r2 = make_model(), make_model()
    o2 = mt.Adam(m2.parameters(), lr=1e-2, maximize=True,
                 store=str(tmp_path / "c"))
    ro2 = torch.optim.Adam(r2.parameters(), lr=1e-2, maximize=True)
    m3 = make_model()
    o3 = mt.Adam(m3.parameters(), lr=1e-2, store=str(tmp_path / "d"))
    for s in range(3):
        train_step(m2, o2, s)
        train_step(r2, ro2, s)
        train_step(m3, o3, s)
    assert max_diff(m2, r2) <= TOL
    assert max_diff(m2, m3) > 1e-2  # not what minimizing does
    x, y = batch(0)  # the one batch: ascending raised its loss
    assert ((m2(x) - y) ** 2).mean() > ((make_model()(x) - y) ** 2).mean()


def test_help_shows_every_optimizer_and_its_keywords():
    """help(mlpo.torch.AdamW) documents the class and mlpo's keywords
    (the docstrings were once sums of strings, which Python does not take
    as docstrings: help() showed nothing)."""
    import pydoc
    for cls in (mt.AdamW, mt.Adam, mt.Lion, mt.Adagrad, mt.SGD):
        text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
        assert cls.__doc__ and cls.__doc__.split()[0] in text
        for word in ("store:", "durability:", "keep_checkpoints:",
                     "state_format:", "dcp_state"):
            assert word in text, (cls.__name__, word)
        for method in ("step", "state_dict", "load_state_dict", "close",
                       "flush", "checkpoint", "tags"):
            assert getattr(cls, method).__doc__, (cls.__name__, method)


def test_two_optimizers_that_loaded_one_dict_give_equal_state_dicts(tmp_path):
    """torch.optim's: two optimizers in the same state (both loaded one
    dict) hand out equal state dicts. The first optimizer still holds the
    dict's namespace, so the other two copy its tag in; each hands the
    loaded dict back until it steps, or until the dict's own tag is
    dropped (then it names its own tag, which loads to the same state)."""
    store = str(tmp_path / "s")
    m1 = make_model()
    o1 = mt.AdamW(m1.named_parameters(), lr=1e-2, store=store, name="a",
                  keep_checkpoints=1)
    for s in range(3):
        train_step(m1, o1, s)
    d = o1.state_dict()
    twins = []
    for name in ("b", "c"):
        m = make_model()
        m.load_state_dict(m1.state_dict())
        o = mt.AdamW(m.named_parameters(), lr=1e-2, store=store, name=name)
        o.load_state_dict(d)
        twins.append((m, o))
    (m2, o2), (m3, o3) = twins
    assert o2.state_dict() == o3.state_dict() == d
    assert o2.state_dict() == d  # asked twice
    # Either one's dict loads the state into a fourth optimizer.
    m4 = make_model()
    o4 = mt.AdamW(m4.named_parameters(), lr=1e-2, store=store, name="d")
    o4.load_state_dict(o3.state_dict())
    assert max_diff(m4, m1) == 0
    o4.close()
    # The dict's own tag dropped (o1 keeps one checkpoint): o2 names its
    # own, which holds the same state.
    train_step(m1, o1, 3)
    o1.state_dict()
    assert d["mlpo"]["tag"] not in o1.tags()
    own = o2.state_dict()
    assert own["mlpo"]["name"] != d["mlpo"]["name"]
    m5 = make_model()
    o5 = mt.AdamW(m5.named_parameters(), lr=1e-2, store=store, name="e")
    o5.load_state_dict(own)
    assert max_diff(m5, m3) == 0
    assert o5.step_count == o3.step_count == 3
    # After a step the state is no longer the dict's: its own tag.
    train_step(m3, o3, 3)
    after = o3.state_dict()
    assert after["mlpo"]["name"] != d["mlpo"]["name"]
    assert after["mlpo"]["step"] == 4
    for o in (o1, o2, o3, o5):
        o.close()
