"""accelerate as a client of mlpo.torch: Accelerator().prepare(model, opt,
loader, scheduler) and its save_state / load_state, side by side with
torch.optim.AdamW from the same seed, and a resume from save_state
bit-identical to an uninterrupted run."""
import torch
from accelerate import Accelerator

import mlpo.torch as mt
from hf_helpers import CharBlocks, max_param_diff, params_of, tiny_gpt2

STEPS = 8


def run(data, make_opt, save_at=None, save_dir=None, load_dir=None,
        seed=0):
    """Trains STEPS steps (from the state in load_dir, if given) through an
    Accelerator; the final parameters and the losses."""
    acc = Accelerator(cpu=True)
    model = tiny_gpt2(len(data.vocab), seed=seed)
    opt = make_opt(model)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 3))
    loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=False)
    model, opt, loader, sched = acc.prepare(model, opt, loader, sched)
    start = 0
    if load_dir is not None:
        acc.load_state(load_dir)
        start = save_at
        loader = acc.skip_first_batches(loader, start)
    losses = []
    for step, batch in enumerate(loader, start):
        if step == STEPS:
            break
        loss = model(**batch).loss
        acc.backward(loss)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(loss.item())
        if save_dir is not None and step + 1 == save_at:
            acc.save_state(save_dir)
    inner = getattr(opt, "optimizer", opt)
    if isinstance(inner, mt.AdamW):
        inner.close()
    return params_of(acc.unwrap_model(model)), losses


def test_accelerate_matches_torch_and_resumes(tmp_path):
    data = CharBlocks()
    store = str(tmp_path / "store")

    def torch_opt(model):
        return torch.optim.AdamW(model.parameters(), lr=3e-3,
                                 weight_decay=0.1)

    def mlpo_opt(model):
        return mt.AdamW(model.named_parameters(), lr=3e-3, weight_decay=0.1,
                        store=store, subgroup_numel=4096)

    ref, ref_losses = run(data, torch_opt)
    full, losses = run(data, mlpo_opt, save_at=4,
                       save_dir=str(tmp_path / "state"))
    assert losses[-1] < losses[0]
    assert max(abs(a - b) for a, b in zip(losses, ref_losses)) <= 1e-5
    assert max_param_diff(full, ref) <= 2e-5  # see test_hf_trainer.TOL
    # A new model from another seed and a new optimizer on the same store,
    # resumed by load_state: what the checkpoint holds decides everything.
    resumed, tail = run(data, mlpo_opt, save_at=4,
                        load_dir=str(tmp_path / "state"), seed=7)
    for n in full:
        assert torch.equal(resumed[n], full[n]), n
    assert tail == losses[4:]


def run_accumulating(data, make_opt, clip):
    """Accelerate's accumulate() over 2 micro-batches and its
    clip_grad_norm_ at each real step; the final parameters and, for
    mlpo, whether each step ran during backward."""
    acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = tiny_gpt2(len(data.vocab), seed=0)
    opt = make_opt(model)
    loader = torch.utils.data.DataLoader(data, batch_size=2, shuffle=False)
    model, opt, loader = acc.prepare(model, opt, loader)
    inner = getattr(opt, "optimizer", opt)
    ran = []
    for i, batch in enumerate(loader):
        if i == 2 * STEPS:
            break
        with acc.accumulate(model):
            acc.backward(model(**batch).loss)
            if acc.sync_gradients:
                acc.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            opt.zero_grad()
            if acc.sync_gradients and isinstance(inner, mt.AdamW):
                r = inner.last_report
                ran.append((bool(r["in_backward"]), bool(r.get("redone"))))
    if isinstance(inner, mt.AdamW):
        inner.close()
    return params_of(acc.unwrap_model(model)), ran


def test_accumulate_and_clip_update_during_backward_exactly(tmp_path):
    """accumulate() (2 micro-batches) and clip_grad_norm_: with the update
    in backward every step ends where the plain step ends, bit for bit;
    a clip that does not clip (by 1e3) redoes nothing once seen, so the
    steps after the first (which learns the count of micro-batches) run in
    backward;
    one that clips is redone (then paused), exactly."""
    data = CharBlocks()

    def opt_of(ib, name):
        return lambda model: mt.AdamW(
            model.named_parameters(), lr=3e-3, weight_decay=0.1,
            store=str(tmp_path / name), subgroup_numel=4096,
            update_in_backward=ib)

    for clip in (1e3, 0.5):
        ref, _ = run_accumulating(data, lambda model: torch.optim.AdamW(
            model.parameters(), lr=3e-3, weight_decay=0.1), clip)
        ib, ran = run_accumulating(data, opt_of(True, f"ib{clip}"), clip)
        plain, _ = run_accumulating(data, opt_of(False, f"pl{clip}"), clip)
        if clip > 1:
            # (the first rewrite seen is redone; after it the gradients'
            # values are compared, and a clip by 1.0 changes none)
            assert ran == [(False, False), (True, True)] + \
                [(True, False)] * (STEPS - 2), ran
        else:
            assert any(redone for _, redone in ran), ran
        for n in ib:
            assert torch.equal(ib[n], plain[n]), (clip, n)
        assert max_param_diff(ib, ref) <= 2e-5
