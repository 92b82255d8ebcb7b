"""A transformers.Trainer run under data parallel (torchrun-style
environment, gloo on the CPU) for test_hf_trainer_ddp.py: a tiny GPT-2,
mlpo.torch.AdamW (with or without mlpo.hf.TrainerCheckpoints) or
torch.optim.AdamW. Rank 0 writes the final parameters to --out."""
import argparse
import json
import os
import sys

import torch
import transformers

sys.path.insert(0, os.path.dirname(__file__))
import mlpo.hf  # noqa: E402
import mlpo.torch as mt  # noqa: E402
from hf_helpers import CharBlocks, tiny_gpt2  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--optimizer", choices=["mlpo", "torch"], default="mlpo")
ap.add_argument("--store")
ap.add_argument("--out", required=True)  # the final parameters (JSON)
ap.add_argument("--dir", required=True)  # Trainer's output_dir
ap.add_argument("--steps", type=int, default=6)
ap.add_argument("--resume")
ap.add_argument("--callback", type=int, default=1)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--batch", type=int, default=2)  # per rank
ap.add_argument("--max-grad-norm", type=float, default=1.0)  # Trainer's
ap.add_argument("--gas", type=int, default=1)  # gradient_accumulation_steps
a = ap.parse_args()

data = CharBlocks()
model = tiny_gpt2(len(data.vocab), seed=a.seed)
args = transformers.TrainingArguments(
    output_dir=a.dir, per_device_train_batch_size=a.batch, max_steps=a.steps,
    learning_rate=3e-3, weight_decay=0.1, save_strategy="steps",
    save_steps=3, report_to="none", use_cpu=True, seed=0, data_seed=0,
    dataloader_num_workers=0, disable_tqdm=True, optim="adamw_torch",
    max_grad_norm=a.max_grad_norm, gradient_accumulation_steps=a.gas)
kw = {}
if a.optimizer == "mlpo":
    kw["optimizer_cls_and_kwargs"] = (mt.AdamW, dict(
        lr=3e-3, betas=(0.9, 0.999), eps=1e-8, store=a.store))
    if a.callback:
        kw["callbacks"] = [mlpo.hf.TrainerCheckpoints()]
ran = []  # whether each step ran during backward


class Ran(transformers.TrainerCallback):
    def on_step_end(self, args, state, control, optimizer=None, **kwargs):
        o = mlpo.hf.mlpo_optimizer(optimizer)
        if o is not None and o.last_report:
            ran.append(bool(o.last_report.get("in_backward")))


if a.optimizer == "mlpo":
    kw["callbacks"] = kw.get("callbacks", []) + [Ran()]
trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                               **kw)
trainer.train(resume_from_checkpoint=a.resume)
if int(os.environ.get("RANK", "0")) == 0:
    with open(a.out, "w") as f:
        json.dump({n: p.detach().reshape(-1).tolist()
                   for n, p in model.named_parameters()}, f)
    with open(f"{a.out}.ran", "w") as f:
        json.dump(ran, f)
# A deterministic end: the optimizer's store closed, then the process
# group taken down after every rank got here (gloo's threads left to the
# interpreter's exit aborted now and then with "terminate called without
# an active exception", in the torch.optim runs as well).
opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
if hasattr(opt, "close"):
    opt.close()
if torch.distributed.is_available() and torch.distributed.is_initialized():
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
