"""transformers.Trainer as a client of mlpo.torch: a small causal LM (GPT-2
and Llama shapes, from a config) trained side by side with Trainer's own
torch AdamW from the same seed; Trainer's checkpoints (save_steps) resumed
with resume_from_checkpoint bit-identical to an uninterrupted run; and
save_total_limit with keep_checkpoints leaving the store's tags exactly
the checkpoints Trainer kept."""
import os
import subprocess

import pytest
import torch
import transformers

import mlpo.hf
import mlpo.torch as mt
from hf_helpers import CharBlocks, max_param_diff, params_of, tiny_gpt2, \
    tiny_llama

STEPS = 8
# torch 2.x's AdamW kernels round with fused multiply-adds where mlpo's
# round each operation (and torch's fused and foreach kernels differ from
# each other by as much: ~4e-6 on this model after 8 steps); the
# parameters move by ~2e-2 in these steps.
TOL = 2e-5


def args(out, **kw):
    base = dict(output_dir=str(out), per_device_train_batch_size=4,
                max_steps=STEPS, learning_rate=3e-3, weight_decay=0.1,
                warmup_steps=2, lr_scheduler_type="linear",
                logging_steps=1, save_strategy="no", report_to="none",
                use_cpu=True, seed=0, data_seed=0,
                dataloader_num_workers=0, disable_tqdm=True,
                optim="adamw_torch")
    base.update(kw)
    return transformers.TrainingArguments(**base)


def unwrap(opt):
    """The optimizer Trainer was given (it wraps it for Accelerate)."""
    return getattr(opt, "optimizer", opt)


def train(out, data, make_model=tiny_gpt2, store=None, resume=None,
          optimizers=None, callbacks=None, pre_close=None, **kw):
    """One Trainer run; its final parameters, losses and trainer. With
    `store`, mlpo.torch.AdamW through optimizer_cls_and_kwargs (Trainer
    builds its decay / no-decay groups and passes lr, betas, eps)."""
    targs = args(out, **trainer_kw(kw))  # the rest of kw is mlpo's
    model = make_model(len(data.vocab))
    extra = {}
    if optimizers is not None:
        extra["optimizers"] = optimizers(model)
    elif store is not None:
        extra["optimizer_cls_and_kwargs"] = (mt.AdamW, dict(
            lr=3e-3, betas=(0.9, 0.999), eps=1e-8, store=store,
            subgroup_numel=4096, **kw))
    trainer = transformers.Trainer(model=model, args=targs,
                                   train_dataset=data, callbacks=callbacks,
                                   **extra)
    result = trainer.train(resume_from_checkpoint=resume)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    opt = unwrap(trainer.optimizer)
    if isinstance(opt, mt.AdamW):
        if pre_close is not None:
            pre_close(opt)
        opt.close()  # as the process ending would: the store is released
    return params_of(model), losses, trainer, result


def trainer_kw(kw):
    return {k: kw.pop(k) for k in list(kw) if k in (
        "save_strategy", "save_steps", "save_total_limit")}


@pytest.fixture(scope="module")
def data():
    return CharBlocks()


@pytest.mark.parametrize("make_model", [tiny_gpt2, tiny_llama],
                         ids=["gpt2", "llama"])
def test_trainer_matches_torch_adamw(tmp_path, data, make_model):
    ref, ref_losses, _, _ = train(tmp_path / "ref", data, make_model)
    got, losses, trainer, _ = train(tmp_path / "mlpo", data, make_model,
                                    store=str(tmp_path / "store"))
    assert isinstance(unwrap(trainer.optimizer), mt.AdamW)
    assert len(losses) == STEPS and losses[-1] < losses[0]
    assert max(abs(a - b) for a, b in zip(losses, ref_losses)) <= 1e-5
    assert max_param_diff(got, ref) <= TOL
    # The scheduler Trainer made over mlpo's optimizer moved its lr.
    assert trainer.lr_scheduler.get_last_lr()[0] == pytest.approx(0.0)


def test_trainer_with_optimizers_tuple(tmp_path, data):
    """optimizers=(mlpo.torch.AdamW(...), scheduler), as the Trainer docs
    show for a custom optimizer."""
    def mlpo_pair(model):
        decay = [p for n, p in model.named_parameters()
                 if not n.endswith("bias") and "ln_" not in n]
        rest = [p for n, p in model.named_parameters()
                if n.endswith("bias") or "ln_" in n]
        groups = [{"params": decay, "weight_decay": 0.1},
                  {"params": rest, "weight_decay": 0.0}]
        opt = mt.AdamW(groups, lr=3e-3, store=str(tmp_path / "store"))
        return opt, transformers.get_linear_schedule_with_warmup(
            opt, 2, STEPS)

    def torch_pair(model):
        decay = [p for n, p in model.named_parameters()
                 if not n.endswith("bias") and "ln_" not in n]
        rest = [p for n, p in model.named_parameters()
                if n.endswith("bias") or "ln_" in n]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": rest, "weight_decay": 0.0}],
                                lr=3e-3)
        return opt, transformers.get_linear_schedule_with_warmup(
            opt, 2, STEPS)

    ref, _, _, _ = train(tmp_path / "ref", data, optimizers=torch_pair)
    got, _, _, _ = train(tmp_path / "mlpo", data, optimizers=mlpo_pair)
    assert max_param_diff(got, ref) <= TOL


def test_trainer_checkpoints_resume_bit_identically(tmp_path, data):
    store = str(tmp_path / "store")
    full, full_losses, _, _ = train(tmp_path / "out", data, store=store,
                                    save_strategy="steps", save_steps=4)
    ckpt = tmp_path / "out" / "checkpoint-4"
    assert (ckpt / "optimizer.pt").exists()
    sd = torch.load(ckpt / "optimizer.pt", weights_only=True)
    assert sd["mlpo"]["tag"] == "step-4"
    # A new model from another seed: the checkpoint decides everything.
    resumed, losses, _, _ = train(
        tmp_path / "out", data, lambda v: tiny_gpt2(v, seed=7), store=store,
        resume=str(ckpt), save_strategy="steps", save_steps=4)
    for n in full:
        assert torch.equal(resumed[n], full[n]), n
    # (the resumed run's log history starts with the checkpoint's)
    assert losses[-4:] == full_losses[4:]


def store_tags(mlpo_cli, store):
    out = subprocess.run([mlpo_cli, "tags", os.path.join(store, "mlpo",
                                                          "rank-0")],
                         capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def folders_and_tags(out):
    """{checkpoint folder: the tag its optimizer.pt names}."""
    return {d: torch.load(out / d / "optimizer.pt",
                          weights_only=True)["mlpo"]["tag"]
            for d in sorted(os.listdir(out)) if d.startswith("checkpoint-")}


def test_save_total_limit_with_keep_checkpoints(tmp_path, data, mlpo_cli):
    """keep_checkpoints=save_total_limit: Trainer deletes all but the
    newest folders and retention drops the other tags. The resume's new
    optimizer takes a step-0 dict in Accelerate's prepare(); that must not
    drop the checkpoint it is about to load (it did)."""
    store = str(tmp_path / "store")
    full, _, _, _ = train(tmp_path / "out", data, store=store,
                          save_strategy="steps", save_steps=2,
                          save_total_limit=2, keep_checkpoints=2)
    assert folders_and_tags(tmp_path / "out") == {
        "checkpoint-6": "step-6", "checkpoint-8": "step-8"}
    assert store_tags(mlpo_cli, store) == {"step-6", "step-8"}
    resumed, _, _, _ = train(tmp_path / "out", data, store=store,
                             resume=str(tmp_path / "out" / "checkpoint-6"),
                             keep_checkpoints=2)
    for n in full:
        assert torch.equal(resumed[n], full[n]), n


def test_tags_follow_trainer_folders(tmp_path, data, mlpo_cli):
    """mlpo.hf.TrainerCheckpoints: after every save the store holds exactly
    the automatic tags the remaining checkpoint folders name, through a
    resume that saves over a folder, each folder loadable; a tag of the
    user's own stays."""
    store = str(tmp_path / "store")
    out = tmp_path / "out"
    # (a callback of its own each run, as a new process has)
    cb = lambda: [mlpo.hf.TrainerCheckpoints()]  # noqa: E731
    full, _, trainer, _ = train(out, data, store=store, callbacks=cb(),
                                save_strategy="steps", save_steps=2,
                                save_total_limit=2)
    assert folders_and_tags(out) == {"checkpoint-6": "step-6",
                                     "checkpoint-8": "step-8"}
    assert store_tags(mlpo_cli, store) == {"step-6", "step-8"}
    resumed, _, _, _ = train(out, data, store=store, callbacks=cb(),
                             resume=str(out / "checkpoint-6"),
                             save_strategy="steps", save_steps=2,
                             save_total_limit=2, pre_close=lambda o:
                             o.checkpoint("mine"))
    for n in full:
        assert torch.equal(resumed[n], full[n]), n
    named = folders_and_tags(out)
    assert sorted(named) == ["checkpoint-6", "checkpoint-8"]
    assert named["checkpoint-8"] != "step-8"  # saved again: a new tag
    assert store_tags(mlpo_cli, store) == set(named.values()) | {"mine"}
    subprocess.run([mlpo_cli, "verify", "--deep", os.path.join(
        store, "mlpo", "rank-0")], check=True, capture_output=True)
    # Each folder left loads, and resumes to the same end.
    again, _, _, _ = train(out, data, store=store, callbacks=cb(),
                           resume=str(out / "checkpoint-6"))
    for n in full:
        assert torch.equal(again[n], full[n]), n


def test_a_run_resumed_into_another_output_dir_keeps_the_old_folders(
        tmp_path, data, mlpo_cli):
    """A careless rerun: resumed from run A's folder into output_dir B on
    the same store, with TrainerCheckpoints and save_total_limit=1. The
    callback drops only tags it saw taken or named under B: A's folders
    still load (they did not: it dropped every tag B's folders did not
    name)."""
    store = str(tmp_path / "store")
    a, b = tmp_path / "a", tmp_path / "b"
    train(a, data, store=store, callbacks=[mlpo.hf.TrainerCheckpoints()],
          save_strategy="steps", save_steps=2)
    before = folders_and_tags(a)
    train(b, data, store=store, callbacks=[mlpo.hf.TrainerCheckpoints()],
          resume=str(a / "checkpoint-4"), save_strategy="steps",
          save_steps=2, save_total_limit=1)
    assert folders_and_tags(a) == before
    assert set(before.values()) <= store_tags(mlpo_cli, store)
    # B's own deleted folders' tags went.
    assert store_tags(mlpo_cli, store) == set(before.values()) | set(
        folders_and_tags(b).values())
