"""The model, data and DeepSpeed config that ds_worker.py trains and
test_deepspeed_import.py continues with mlpo."""
import torch

LR, WD = 1e-2, 0.1
BATCH = 8  # the global batch; each of the ranks takes its share


def ds_model(seed):
    torch.manual_seed(seed)
    # 33 and 9: partitions that cut parameters across ranks
    return torch.nn.Sequential(torch.nn.Linear(16, 33), torch.nn.Tanh(),
                               torch.nn.Linear(33, 9), torch.nn.Tanh(),
                               torch.nn.Linear(9, 4))


def ds_batch(step):
    g = torch.Generator().manual_seed(500 + step)
    return torch.randn(BATCH, 16, generator=g), torch.randn(BATCH, 4,
                                                            generator=g)


def ds_part(step, rank, world):
    x, y = ds_batch(step)
    k = BATCH // world
    return x[rank * k:(rank + 1) * k], y[rank * k:(rank + 1) * k]


def ds_config(stage, world):
    return {"train_micro_batch_size_per_gpu": BATCH // world,
            "gradient_accumulation_steps": 1, "gradient_clipping": 0.0,
            "zero_optimization": {"stage": stage},
            "optimizer": {"type": "AdamW", "params": {
                "lr": LR, "weight_decay": WD, "torch_adam": True}},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 1 << 30}
