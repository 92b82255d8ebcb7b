#!/usr/bin/env python3
"""Quick start: Hugging Face Trainer with mlpo keeping the optimizer state.

A small GPT-2 (built from a config; or --model DIR, a local
save_pretrained() directory) trains on this repository's own docs, one
character a token, with transformers.Trainer. The only mlpo lines are the
optimizer (mlpo.torch.AdamW through Trainer's optimizer_cls_and_kwargs)
and the callback that keeps the store's checkpoints in step with
Trainer's folders. Its fp32 master weights and Adam moments live in a
store on two directories, each capped to a few hundred MB/s and with a
DRAM tier of a quarter of the state, so every step really reads and
writes both; the log shows the bytes per tier. About a minute on 2 cores:

    .venv/bin/python examples/finetune_hf.py            # (PYTHONPATH=build/python
    .venv/bin/python examples/finetune_hf.py --resume   #  in a source tree)

--resume goes on from the newest checkpoint folder under --out (Trainer's
resume_from_checkpoint; the folder's optimizer.pt names a tag of the
store). Then `mlpo tags var/hf/nvme/finetune/rank-0` lists the checkpoints.
"""
import argparse
import glob
import os
import sys
import time

try:
    import torch
    import transformers
except ImportError as e:
    sys.exit(f"finetune_hf.py: {e}; run it with mlpo's venv "
             "(.venv/bin/python, made by scripts/deps.sh)")

import mlpo.hf
import mlpo.torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class DocsText(torch.utils.data.Dataset):
    """The repository's README and docs as BLOCK-character windows."""

    def __init__(self, block, vocab=None):
        files = [os.path.join(ROOT, "README.md")] + sorted(
            glob.glob(os.path.join(ROOT, "docs", "*.md")))
        text = "\n".join(open(f, encoding="utf-8").read() for f in files)
        self.vocab = vocab or sorted(set(text))
        index = {c: i for i, c in enumerate(self.vocab)}
        ids = torch.tensor([index.get(c, 0) for c in text])
        n = (len(ids) - 1) // block
        self.blocks = ids[:n * block].view(n, block)

    def __len__(self):
        return len(self.blocks)

    def __getitem__(self, i):
        return {"input_ids": self.blocks[i], "labels": self.blocks[i]}


class TierBytes(transformers.TrainerCallback):
    """Adds the bytes the optimizer's step moved per tier to Trainer's log
    (read + written since the last log line, in MB)."""

    def __init__(self):
        self.moved = {}

    def on_step_end(self, args, state, control, optimizer=None, **kw):
        opt = mlpo.hf.mlpo_optimizer(optimizer)
        rep = opt.last_report if opt is not None else None
        if not rep:
            return
        dram = self.moved.setdefault("dram", 0)
        self.moved["dram"] = dram + rep["cache_hit_bytes"]
        for p in rep["paths"]:
            k = os.path.basename(p["root"].rstrip("/"))
            self.moved[k] = self.moved.get(k, 0) + p["read"] + p["written"]

    def on_log(self, args, state, control, logs=None, **kw):
        if logs is not None and "loss" in logs:
            for k, v in self.moved.items():
                logs[f"{k}_MB"] = round(v / 1e6, 1)
            self.moved = {}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "var", "hf", "out"),
                    help="Trainer's output_dir (checkpoint folders)")
    ap.add_argument("--tiers", default=",".join(
        os.path.join(ROOT, "var", "hf", t) for t in ("nvme", "pfs")),
        help="the store's two directories, comma-separated")
    ap.add_argument("--caps", default="400M,200M",
                    help="read and write cap of each tier, bytes/s")
    ap.add_argument("--dram", default="25%",
                    help="DRAM tier: a share of the state or a size "
                         "(0: off)")
    ap.add_argument("--model", help="a local save_pretrained() directory "
                    "to fine-tune (default: a small GPT-2 from a config)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--save-steps", type=int, default=20,
                    help="a checkpoint folder every N steps (Trainer keeps "
                         "the newest 2, and the store their tags)")
    ap.add_argument("--resume", action="store_true",
                    help="go on from the newest checkpoint under --out")
    a = ap.parse_args()

    data = DocsText(a.block)
    if a.model:
        model = transformers.AutoModelForCausalLM.from_pretrained(a.model)
        model.resize_token_embeddings(len(data.vocab))
    else:
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=len(data.vocab), n_positions=a.block, n_embd=192,
            n_layer=3, n_head=4, bos_token_id=0, eos_token_id=0))
    tiers = a.tiers.split(",")
    caps = a.caps.split(",")
    for t in tiers:
        os.makedirs(t, exist_ok=True)
    store = {"name": "finetune", "cache": a.dram, "durability": "tag",
             "path": [{"root": t, "kind": k, "read_cap": c, "write_cap": c}
                      for t, k, c in zip(tiers, ("nvme", "pfs"), caps)]}
    args = transformers.TrainingArguments(
        output_dir=a.out, max_steps=a.steps, per_device_train_batch_size=8,
        learning_rate=1e-3, weight_decay=0.1, warmup_steps=5,
        lr_scheduler_type="cosine", save_steps=a.save_steps,
        logging_steps=max(1, min(10, a.steps // 3)),
        save_total_limit=2, report_to="none", use_cpu=True, seed=0,
        dataloader_num_workers=0)
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=data,
        # mlpo's two lines: the optimizer, with its store ...
        optimizer_cls_and_kwargs=(mlpo.torch.AdamW, dict(
            lr=args.learning_rate, store=store, resume=False)),
        # ... and its checkpoints following Trainer's folders.
        callbacks=[mlpo.hf.TrainerCheckpoints(), TierBytes()])
    n = sum(p.numel() for p in model.parameters())
    print(f"finetune_hf: {n / 1e6:.1f}M parameters, state "
          f"{12 * n / 1e6:.0f} MB on {', '.join(tiers)} (caps {a.caps} B/s, "
          f"DRAM tier {a.dram})", flush=True)
    t0 = time.time()
    last = None
    if a.resume:
        folders = glob.glob(os.path.join(a.out, "checkpoint-*"))
        if not folders:
            sys.exit(f"finetune_hf.py: --resume: no checkpoint folder under "
                     f"{a.out}; run without --resume first")
        last = max(folders, key=lambda f: int(f.rsplit("-", 1)[1]))
        print(f"finetune_hf: resuming from {last}", flush=True)
    result = trainer.train(resume_from_checkpoint=last)
    opt = mlpo.hf.mlpo_optimizer(trainer.optimizer)
    store_dir = os.path.join(tiers[0], "finetune", "rank-0")
    print(f"finetune_hf: {result.global_step} steps in "
          f"{time.time() - t0:.0f} s, final loss "
          f"{next((h['loss'] for h in reversed(trainer.state.log_history) if 'loss' in h), float('nan')):.3f}; "
          f"checkpoints {sorted(os.listdir(a.out))}; the store's tags: "
          f"{sorted(opt.tags())} (mlpo tags {store_dir})", flush=True)
    opt.close()


if __name__ == "__main__":
    main()
