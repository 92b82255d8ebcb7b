"""update_in_backward=True: the update of a subgroup runs while backward
goes on, as soon as every gradient in it is final. It is speculative (a
store transaction), so the result is the plain step's bit for bit
(parameters and state) in every pattern torch allows: a tied weight, a
parameter without a gradient, two param groups, gradient accumulation
where a parameter misses micro-batches, set_to_none=False with a branch
unused, a second backward, clipping (the optimizer's or the user's own
after backward), loss scaling, a non-finite gradient (the step skipped
whole), an exception in the middle of backward then zero_grad (nothing
applied), a close and a resume."""
import copy

import pytest
import torch

import mlpo.torch as mt

HYPER = dict(lr=1e-2, weight_decay=0.05)


class Tied(torch.nn.Module):
    """A GPT-shaped toy: embedding, two layers, the head tied to the
    embedding (its gradient is final only at the end of backward), and a
    parameter that never gets a gradient."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(64, 32)
        self.l1 = torch.nn.Linear(32, 48)
        self.l2 = torch.nn.Linear(48, 32)
        self.unused = torch.nn.Parameter(torch.randn(40))

    def forward(self, x):
        h = self.emb(x)
        h = h + self.l2(torch.tanh(self.l1(h)))
        return h @ self.emb.weight.t()


def loss_of(model, step, part=0):
    g = torch.Generator().manual_seed(100 * step + part)
    x = torch.randint(0, 64, (4, 8), generator=g)
    y = torch.randint(0, 64, (4, 8), generator=g)
    return torch.nn.functional.cross_entropy(
        model(x).reshape(-1, 64), y.reshape(-1))


def groups(model):
    decay = [(n, p) for n, p in model.named_parameters() if p.dim() > 1]
    rest = [(n, p) for n, p in model.named_parameters() if p.dim() <= 1]
    return [{"params": decay}, {"params": rest, "weight_decay": 0.0}]


def pair(tmp_path, model=None, plain_kw=None, **kw):
    model = model or Tied
    a, b = model(), model()
    ours = mt.AdamW(groups(a), **HYPER, store=str(tmp_path / "a"),
                    subgroup_numel=700, update_in_backward=True, **kw)
    plain_kw = dict(kw if plain_kw is None else plain_kw,
                    update_in_backward=False)
    plain_kw = {k: v for k, v in plain_kw.items()
                if k not in ("accumulation_steps",)}
    plain = mt.AdamW(groups(b), **HYPER, store=str(tmp_path / "b"),
                     subgroup_numel=700, **plain_kw)
    return (a, ours), (b, plain)


def train(model, opt, step, parts=1):
    opt.zero_grad(set_to_none=True)
    for part in range(parts):
        loss_of(model, step, part).backward()
    opt.step()


def assert_same(a, oa, b, ob):
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), n
        sa, sb = oa.state[p], ob.state[q]
        assert bool(sa) == bool(sb), n  # (never stepped: no state)
        if not sa:
            continue
        for k in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(torch.as_tensor(sa[k]),
                               torch.as_tensor(sb[k])), (n, k)


def test_equals_the_plain_step_bit_for_bit(tmp_path):
    (a, ours), (b, plain) = pair(tmp_path)
    for step in range(1, 7):
        ours.zero_grad(set_to_none=True)
        loss_of(a, step).backward()
        # The step started in backward; step() waits for what is left.
        assert ours._engine.stepping_in_backward
        ours.step()
        assert not ours._engine.stepping_in_backward
        train(b, plain, step)
        assert_same(a, ours, b, plain)
    assert ours.last_report["step"] == 6
    assert "grad_wait_s" in ours.last_report
    # torch.optim itself agrees (to the ulp its fused CPU ops allow)
    ref = Tied()
    ropt = torch.optim.AdamW(
        [{"params": [p for _, p in g["params"]],
          **{k: v for k, v in g.items() if k != "params"}}
         for g in groups(ref)], **HYPER)
    for step in range(1, 7):
        train(ref, ropt, step)
    for p, q in zip(a.parameters(), ref.parameters()):
        assert (p - q).abs().max() <= 1e-6
    ours.close()
    plain.close()


def test_accumulation_steps_updates_in_the_last_backward(tmp_path):
    (a, ours), (b, plain) = pair(tmp_path, accumulation_steps=3)
    for step in range(1, 4):
        ours.zero_grad(set_to_none=True)
        for part in range(3):
            assert not ours._engine.stepping_in_backward
            loss_of(a, step, part).backward()
        assert ours._engine.stepping_in_backward
        ours.step()
        train(b, plain, step, parts=3)
        assert_same(a, ours, b, plain)
    # Fewer backwards than that before step(): the plain step, exact too.
    ours.zero_grad(set_to_none=True)
    loss_of(a, 9).backward()
    ours.step()
    train(b, plain, 9)
    assert_same(a, ours, b, plain)
    ours.close()
    plain.close()


class Branchy(Tied):
    """Tied, with a branch used only when the step (or micro-batch) says
    so: its parameters get a gradient in some backwards only."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.branch = torch.nn.Linear(32, 32)
        self.use_branch = True

    def forward(self, x):
        h = self.emb(x)
        h = h + self.l2(torch.tanh(self.l1(h)))
        if self.use_branch:
            h = h + self.branch(h)
        return h @ self.emb.weight.t()


def test_accumulation_where_a_parameter_misses_micro_batches(tmp_path):
    """A parameter with a gradient in the first micro-batch only (its hook
    does not fire in the last backward) and one in the last only: both
    updated with what they accumulated, as torch.optim does."""
    (a, ours), (b, plain) = pair(tmp_path, model=Branchy,
                                 accumulation_steps=2)
    for step in range(1, 5):
        for m, o in ((a, ours), (b, plain)):
            o.zero_grad(set_to_none=True)
            for part in range(2):
                # odd steps: the branch in the first micro-batch only;
                # even steps: in the last only
                m.use_branch = (part == 0) == (step % 2 == 1)
                loss_of(m, step, part).backward()
            o.step()
        assert_same(a, ours, b, plain)
    ours.close()
    plain.close()


def test_set_to_none_false_with_an_unused_branch(tmp_path):
    """zero_grad(set_to_none=False) keeps zero gradients: a branch unused in
    a step still steps with them (its moments decay), as torch.optim's."""
    (a, ours), (b, plain) = pair(tmp_path, model=Branchy)
    for step in range(1, 6):
        for m, o in ((a, ours), (b, plain)):
            o.zero_grad(set_to_none=False)
            m.use_branch = step in (1, 2)
            loss_of(m, step).backward()
            o.step()
        assert_same(a, ours, b, plain)
    # and torch.optim agrees
    ref = Branchy()
    ropt = torch.optim.AdamW(
        [{"params": [p for _, p in g["params"]],
          **{k: v for k, v in g.items() if k != "params"}}
         for g in groups(ref)], **HYPER)
    for step in range(1, 6):
        ropt.zero_grad(set_to_none=False)
        ref.use_branch = step in (1, 2)
        loss_of(ref, step).backward()
        ropt.step()
    for p, q in zip(a.parameters(), ref.parameters()):
        assert (p - q).abs().max() <= 1e-6
    ours.close()
    plain.close()


def two_backwards(model, step, how):
    loss = loss_of(model, step)
    loss.backward(retain_graph=how == "retain_graph")
    if how == "retain_graph":
        loss.backward()
    else:
        loss_of(model, step, part=1).backward()


@pytest.mark.parametrize("how", ["retain_graph", "one_more"])
def test_a_backward_beyond_accumulation_steps_is_exact(tmp_path, how):
    """A backward after the one the update ran in: the step writes copies of
    the parameters, so that backward saw the parameters torch.optim's
    would; the step running is discarded and step() runs the plain step,
    with a warning that accumulation_steps was exceeded."""
    (a, ours), (b, plain) = pair(tmp_path, accumulation_steps=1,
                                 plain_kw=dict(update_in_backward=False))
    train(a, ours, 1)
    train(b, plain, 1)
    ours.zero_grad(set_to_none=True)
    two_backwards(a, 2, how)
    assert not ours._engine.stepping_in_backward  # discarded already
    with pytest.warns(RuntimeWarning, match="accumulation_steps=1"):
        ours.step()
    plain.zero_grad(set_to_none=True)
    two_backwards(b, 2, how)
    plain.step()
    assert ours.step_count == 2
    assert_same(a, ours, b, plain)
    for step in (3, 4):
        train(a, ours, step)
        train(b, plain, step)
        assert_same(a, ours, b, plain)
    ours.close()
    plain.close()


def test_accumulation_is_learned_when_not_given(tmp_path):
    """accumulation_steps left None: the first step with two micro-batches
    is redone (plain), then the update runs in the second backward of each
    step; exact throughout."""
    (a, ours), (b, plain) = pair(tmp_path,
                                 plain_kw=dict(update_in_backward=False))
    assert ours.accumulation_steps is None and ours.update_in_backward
    for step in range(1, 5):
        ours.zero_grad(set_to_none=True)
        loss_of(a, step, 0).backward()
        # the first step expects one backward; later ones two
        assert ours._engine.stepping_in_backward == (step == 1)
        loss_of(a, step, 1).backward()
        assert ours._engine.stepping_in_backward == (step > 1)
        ours.step()
        train(b, plain, step, parts=2)
        assert_same(a, ours, b, plain)
    ours.close()
    plain.close()


def test_a_forward_between_backward_and_step_sees_the_old_parameters(
        tmp_path):
    """The running step writes copies: a loss evaluated between backward and
    step() (logging, an evaluation) is torch.optim's."""
    (a, ours), (b, plain) = pair(tmp_path,
                                 plain_kw=dict(update_in_backward=False))
    for step in (1, 2, 3):
        ours.zero_grad(set_to_none=True)
        loss_of(a, step).backward()
        assert ours._engine.stepping_in_backward
        with torch.no_grad():
            seen = loss_of(a, 50 + step)
        ours.step()
        plain.zero_grad(set_to_none=True)
        loss_of(b, step).backward()
        with torch.no_grad():
            want = loss_of(b, 50 + step)
        plain.step()
        assert torch.equal(seen, want)
        assert_same(a, ours, b, plain)
    ours.close()
    plain.close()


def test_the_default_is_on_and_off_says_so(tmp_path):
    """On by default for one process with host parameters; False turns it
    off (no hook runs, step() does the whole update)."""
    m = Tied()
    on = mt.AdamW(m.parameters(), store=str(tmp_path / "on"))
    assert on.update_in_backward and on._bwd._bwd_hooks
    on.close()
    off = mt.AdamW(m.parameters(), store=str(tmp_path / "off"),
                   update_in_backward=False)
    assert not off.update_in_backward and not off._bwd._bwd_hooks
    loss_of(m, 1).backward()
    assert not off._engine.stepping_in_backward
    off.step()
    assert off.step_count == 1
    off.close()


def test_hooks_left_behind_by_a_vanished_optimizer_do_nothing(tmp_path):
    """The model's hooks hold the update in backward weakly: an optimizer
    gone without removing them (its close() never ran) leaves hooks that
    do nothing, and the model trains on with another optimizer. (A hook of
    a collected optimizer returned False, which torch takes for a new
    gradient: backward raised TypeError.)"""
    import gc
    m, ref = Tied(), Tied()
    ref.load_state_dict(m.state_dict())
    gone = mt.AdamW(m.parameters(), store=str(tmp_path / "gone"))
    assert gone._bwd._bwd_hooks
    gone._bwd._bwd_hooks = []  # close() now leaves the hooks on the model
    del gone
    gc.collect()
    ours = mt.AdamW(m.parameters(), lr=1e-2, store=str(tmp_path / "s"),
                    update_in_backward=False)
    plain = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for step in range(2):
        for model, opt in ((m, ours), (ref, plain)):
            opt.zero_grad(set_to_none=True)
            loss_of(model, step).backward()
            opt.step()
    for a, b in zip(m.parameters(), ref.parameters()):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)
    ours.close()


def test_clipping_in_backward_is_redone_where_it_clips(tmp_path):
    """max_grad_norm with the update in backward: speculative; the steps
    whose norm is above it are discarded and redone clipped."""
    (a, ours), (b, plain) = pair(tmp_path, max_grad_norm=2.0)
    redone = 0
    for step in range(1, 7):
        for m, o in ((a, ours), (b, plain)):
            o.zero_grad(set_to_none=True)
            # every other step's loss is large: its norm clips
            (loss_of(m, step) * (20.0 if step % 2 else 0.01)).backward()
            o.step()
        assert ours.last_report["redone"] == (plain.last_report["clip_coef"] < 1)
        assert ours.last_report["clip_coef"] == plain.last_report["clip_coef"]
        redone += ours.last_report["redone"]
        assert_same(a, ours, b, plain)
    assert redone == 3
    ours.close()
    plain.close()


def test_the_users_own_clipping_after_backward_is_redone(tmp_path):
    """clip_grad_norm_ after backward (Trainer's default) changes the
    gradients the update in backward used: step() redoes the step with
    the clipped ones."""
    (a, ours), (b, plain) = pair(tmp_path)
    for step in range(1, 4):
        for m, o in ((a, ours), (b, plain)):
            o.zero_grad(set_to_none=True)
            loss_of(m, step).backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            o.step()
        # (after two redone in a row the third runs whole: see below)
        assert ours.last_report["redone"] == (step <= 2)
        assert_same(a, ours, b, plain)
    ours.close()
    plain.close()


def test_a_clip_that_does_not_clip_is_not_redone(tmp_path):
    """clip_grad_norm_ multiplies every gradient in place even when the norm
    is under the threshold (by 1.0: the same values, new versions): after
    the first such step the values are compared, and only a clip that
    changes them redoes the step."""
    (a, ours), (b, plain) = pair(tmp_path)
    redone = []
    for step in range(1, 8):
        limit = 0.5 if step in (4, 6) else 1e6
        for m, o in ((a, ours), (b, plain)):
            o.zero_grad(set_to_none=True)
            loss_of(m, step).backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), limit)
            o.step()
        redone.append(ours.last_report["redone"])
        assert_same(a, ours, b, plain)
    # step 1 finds the rewrite; 4 and 6 clip
    assert redone == [True, False, False, True, False, True, False]
    ours.close()
    plain.close()


def test_loss_scaling_and_a_non_finite_gradient_skip_the_step_whole(
        tmp_path):
    (a, ours), (b, plain) = pair(tmp_path, loss_scale=64.0)
    for step in (1, 2):
        for m, o in ((a, ours), (b, plain)):
            o.zero_grad(set_to_none=True)
            (loss_of(m, step) * 64.0).backward()
            o.step()
        assert_same(a, ours, b, plain)
    for m, o in ((a, ours), (b, plain)):
        o.zero_grad(set_to_none=True)
        (loss_of(m, 3) * float("inf")).backward()
        with pytest.warns(RuntimeWarning, match="skipped"):
            o.step()
    assert ours.last_report["skipped"]
    assert ours.step_count == 2 and ours.skipped_steps == 1
    assert_same(a, ours, b, plain)  # nothing of the step applied
    for step in (3, 4):
        for m, o in ((a, ours), (b, plain)):
            o.zero_grad(set_to_none=True)
            (loss_of(m, step) * 64.0).backward()
            o.step()
        assert_same(a, ours, b, plain)
    ours.close()
    plain.close()


class Boom(Exception):
    pass


def test_an_exception_in_backward_then_zero_grad_applies_nothing(tmp_path):
    """backward raises half-way (the head's and the last layer's gradients
    were handed in and updated): zero_grad() discards the step and the
    parameters are as before it, as torch.optim never stepped."""
    (a, ours), (b, plain) = pair(tmp_path)
    for step in (1, 2):
        train(a, ours, step)
        train(b, plain, step)
    ours.zero_grad(set_to_none=True)
    x = torch.randint(0, 64, (4, 8), generator=torch.Generator().manual_seed(5))
    h = a.emb(x)
    h1 = torch.tanh(a.l1(h))

    def boom(g):
        raise Boom("in the middle of backward")
    h1.register_hook(boom)
    out = (h + a.l2(h1)) @ a.emb.weight.t()
    with pytest.raises(Boom):
        out.square().mean().backward()
    assert ours._engine.stepping_in_backward
    ours.zero_grad(set_to_none=True)
    assert ours.step_count == 2
    assert_same(a, ours, b, plain)
    for step in (3, 4):
        train(a, ours, step)
        train(b, plain, step)
        assert_same(a, ours, b, plain)
    ours.close()
    plain.close()


@pytest.mark.parametrize("kw, why", [
    (dict(accumulation_steps=0), "accumulation_steps"),
    (dict(accumulation_steps=1.5), "accumulation_steps"),
    (dict(update_in_backward="yes"), "update_in_backward"),
])
def test_bad_options_are_refused(tmp_path, kw, why):
    with pytest.raises(ValueError, match=why):
        mt.AdamW(Tied().parameters(), store=str(tmp_path / "s"),
                 **{"update_in_backward": True, **kw})


def test_state_reads_and_resume_finish_the_step_close_discards_it(tmp_path):
    (a, ours), (b, plain) = pair(tmp_path)
    for step in (1, 2):
        loss_of(a, step).backward()
        sd = ours.state_dict()  # finishes the step, then checkpoints
        ours.step()             # nothing left to do
        ours.zero_grad(set_to_none=True)
        train(b, plain, step)
        assert_same(a, ours, b, plain)
    assert ours.step_count == 2
    loss_of(a, 3).backward()
    with pytest.warns(RuntimeWarning, match="discarded"):
        ours.close()            # step() never came: nothing of it applied
    again = mt.AdamW(groups(a), **HYPER, store=str(tmp_path / "a"),
                     subgroup_numel=700, update_in_backward=True,
                     resume=True)
    assert again.step_count == 2
    for step in (3, 4, 5):
        train(a, again, step)
        train(b, plain, step)
    assert_same(a, again, b, plain)
    # An older checkpoint loads and training goes on from it exactly.
    again.load_state_dict(sd)
    assert again.step_count == 2
    again.close()
    plain.close()


def test_flush_makes_what_returned_durable(tmp_path):
    (a, ours), _ = pair(tmp_path)
    train(a, ours, 1)
    ours.flush()
    train(a, ours, 2)
    ours.flush()
    assert ours.step_count == 2
    ours.close()


@pytest.mark.parametrize("in_bwd", [False, True])
def test_a_loop_that_reads_the_state_keeps_its_read_ahead(tmp_path, in_bwd):
    """Logging opt.state[p] and taking state_dict() between steps keeps the
    read-ahead (a read changes nothing; an edit adopted by the checkpoint
    is read again by the step's version check): used, and exact."""
    store = {"path": str(tmp_path / "s"), "read_ahead": 8, "cache": 0}
    (a, ours), (b, plain) = pair(
        tmp_path, plain_kw=dict(update_in_backward=False))
    ours.close()
    ours = mt.AdamW(groups(a), **HYPER, store=store, subgroup_numel=700,
                    update_in_backward=in_bwd)
    used = 0
    for step in range(1, 6):
        train(a, ours, step)
        train(b, plain, step)
        if step > 1:
            used += ours.last_report["read_ahead_used"]
        ours.state[a.l1.weight]["exp_avg"].sum()  # logged every step
        if step == 3:
            with torch.no_grad():
                a.l2.bias[0] += 1.0  # an edit the checkpoint adopts
                b.l2.bias[0] += 1.0
            ours.state_dict()
    assert used > 0
    assert_same(a, ours, b, plain)
    ours.close()
    plain.close()


def test_speculation_pauses_while_every_step_is_redone(tmp_path):
    """A clip that clips every step makes each speculative run a waste: after
    two redone steps in a row the next 2 run whole (then 4, ...); a step
    that is not redone ends the pause. Exact throughout."""
    (a, ours), (b, plain) = pair(tmp_path)
    ran = []
    for step in range(1, 10):
        limit = 1e-4 if step <= 7 else 1e6
        for m, o in ((a, ours), (b, plain)):
            o.zero_grad(set_to_none=True)
            loss_of(m, step).backward()
            if o is ours:
                ran.append(ours._engine.stepping_in_backward)
            torch.nn.utils.clip_grad_norm_(m.parameters(), limit)
            o.step()
        assert_same(a, ours, b, plain)
    # 1, 2 redone; 3, 4 whole; 5, 6 redone; 7 (and on, 4 steps) whole
    assert ran == [True, True, False, False, True, True, False, False, False]
    ours.close()
    plain.close()


@pytest.mark.parametrize("faster", [True, False])
def test_the_default_keeps_the_faster_way_it_measured(monkeypatch, faster):
    """update_in_backward left None: after warm-up, steps alternate between
    the two ways (both exact) and the one with the smaller median iteration
    time runs the next KEEP steps, then a new probe."""
    from mlpo import _backward_choice
    clock = [0.0]
    monkeypatch.setattr(_backward_choice.time, "perf_counter", lambda: clock[0])
    auto = _backward_choice.AutoChoice()
    ran = []
    for _ in range(auto.SKIP + 2 * auto.PROBE + 5):
        spec = auto.speculate()
        ran.append(spec)
        clock[0] += 1.0 if spec == faster else 1.5
        auto.stepped(spec)
    assert ran[:auto.SKIP] == [False] * auto.SKIP
    assert ran[auto.SKIP:auto.SKIP + 2 * auto.PROBE] == \
        [True, False] * auto.PROBE
    assert ran[-5:] == [faster] * 5
    assert auto.chosen == faster
    for _ in range(auto.KEEP - 5):
        auto.stepped(auto.speculate())
    assert auto.speculate() is True and auto.probing  # probing again


def test_the_default_trains_exactly_whichever_way_it_runs(tmp_path):
    """The default (None) switches between the ways as it measures; every
    step is torch.optim's all the same, and last_report says which ran."""
    a, b = Tied(), Tied()
    ours = mt.AdamW(groups(a), **HYPER, store=str(tmp_path / "a"),
                    subgroup_numel=700)
    plain = mt.AdamW(groups(b), **HYPER, store=str(tmp_path / "b"),
                     subgroup_numel=700, update_in_backward=False)
    ways = set()
    for step in range(1, 12):
        train(a, ours, step)
        train(b, plain, step)
        ways.add(ours.last_report["in_backward"])
        assert_same(a, ours, b, plain)
    assert ways == {True, False}
    ours.close()
    plain.close()
