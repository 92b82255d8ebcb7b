"""update_in_backward=True: the update of a subgroup runs while backward
goes on, as soon as every gradient in it is final. The result is the plain
step's bit for bit (parameters and state), across a tied weight, a
parameter without a gradient, two param groups, gradient accumulation, a
close and a resume; what cannot be exact is refused with the reason; a
non-finite gradient stops the step with an error and a checkpoint taken
before restores a state that trains on as the reference does."""
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


def pair(tmp_path, **kw):
    a, b = Tied(), Tied()
    ours = mt.AdamW(groups(a), **HYPER, store=str(tmp_path / "a"),
                    subgroup_numel=700, update_in_backward=True, **kw)
    plain = mt.AdamW(groups(b), **HYPER, store=str(tmp_path / "b"),
                     subgroup_numel=700)
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


def test_a_second_backward_without_the_option_is_an_error(tmp_path):
    (a, ours), _ = pair(tmp_path)
    loss_of(a, 1).backward()
    with pytest.raises(RuntimeError, match="accumulation_steps"):
        loss_of(a, 1, part=1).backward()
    ours.close()


@pytest.mark.parametrize("kw, why", [
    (dict(max_grad_norm=1.0), "global norm"),
    (dict(loss_scale=1024.0), "loss scaling"),
    (dict(accumulation_steps=0), "accumulation_steps"),
    (dict(accumulation_steps=1.5), "accumulation_steps"),
])
def test_what_cannot_be_exact_is_refused(tmp_path, kw, why):
    with pytest.raises(ValueError, match=why):
        mt.AdamW(Tied().parameters(), store=str(tmp_path / "s"),
                 update_in_backward=True, **kw)


def test_state_reads_close_and_resume_finish_the_step_first(tmp_path):
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
    ours.close()                # the step running is finished and stored
    train(b, plain, 3)
    again = mt.AdamW(groups(a), **HYPER, store=str(tmp_path / "a"),
                     subgroup_numel=700, update_in_backward=True,
                     resume=True)
    assert again.step_count == 3
    for step in (4, 5):
        train(a, again, step)
        train(b, plain, step)
    assert_same(a, again, b, plain)
    # An older checkpoint loads and training goes on from it exactly.
    again.load_state_dict(sd)
    assert again.step_count == 2
    again.close()
    plain.close()


def test_a_non_finite_gradient_stops_the_step_and_a_checkpoint_restores(
        tmp_path):
    (a, ours), (b, plain) = pair(tmp_path)
    train(a, ours, 1)
    train(b, plain, 1)
    sd = ours.state_dict()
    model_sd = copy.deepcopy(a.state_dict())
    ours.zero_grad(set_to_none=True)
    loss = loss_of(a, 2) * float("inf")
    loss.backward()
    with pytest.raises(RuntimeError, match="non-finite"):
        ours.step()
    # The store reopens at the next call; the checkpoint from before
    # restores the state, and training continues as the reference does.
    with pytest.warns(RuntimeWarning):
        ours.load_state_dict(sd)
    a.load_state_dict(model_sd)
    ours.load_state_dict(sd)
    for step in (2, 3):
        train(a, ours, step)
        train(b, plain, step)
    assert_same(a, ours, b, plain)
    ours.close()
    plain.close()


def test_gradients_changed_after_backward_are_reported(tmp_path):
    """Clipping after backward (as Trainer does by default) comes too late
    for an update run during backward: step() says so."""
    (a, ours), _ = pair(tmp_path)
    loss_of(a, 1).backward()
    torch.nn.utils.clip_grad_norm_(a.parameters(), 1e-3)
    with pytest.raises(RuntimeError, match="changed in place after backward"):
        ours.step()
    assert ours.step_count == 1  # the step ran, with backward's gradients
    ours.close()
