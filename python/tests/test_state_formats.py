"""mlpo.torch with compact moments (state_format): training against
torch.optim.AdamW within what each format rounds, checkpoints that resume
bit for bit, the format fixed with the store, torch state quantised on the
way in, and bad names refused."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import mlpo.torch
from test_checkpoints import read_safetensors

FORMATS = ["fp32", "bf16-moments", "int8-moments"]
LR = 1e-2


def model_pair(seed=0):
    torch.manual_seed(seed)
    a = torch.nn.Sequential(torch.nn.Linear(40, 300), torch.nn.Tanh(),
                            torch.nn.Linear(300, 3))
    b = torch.nn.Sequential(torch.nn.Linear(40, 300), torch.nn.Tanh(),
                            torch.nn.Linear(300, 3))
    b.load_state_dict(a.state_dict())
    return a, b


def train(model, opt, steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(16, 40, generator=g)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


@pytest.mark.parametrize("fmt", FORMATS)
def test_training_follows_torch_within_the_format(tmp_path, fmt):
    ours, ref = model_pair()
    opt = mlpo.torch.AdamW(ours.parameters(), lr=LR, betas=(0.9, 0.95),
                           store=str(tmp_path), state_format=fmt)
    assert opt.state_format == fmt
    topt = torch.optim.AdamW(ref.parameters(), lr=LR, betas=(0.9, 0.95))
    steps = 15
    train(ours, opt, steps)
    train(ref, topt, steps)
    # Each step's update m / sqrt(v) carries the format's rounding.
    per_step = {"fp32": 1e-5, "bf16-moments": 0.03, "int8-moments": 0.25}[fmt]
    for p, q in zip(ours.parameters(), ref.parameters()):
        assert (p - q).abs().max().item() <= per_step * LR * steps + 1e-6
        st, tst = opt.state[p], topt.state[q]
        assert int(st["step"]) == steps
        # The trajectories part (other parameters, other gradients), so m
        # drifts further than one rounding.
        rel = {"fp32": 1e-5, "bf16-moments": 0.06, "int8-moments": 0.4}[fmt]
        err = (st["exp_avg"] - tst["exp_avg"]).norm() / tst["exp_avg"].norm()
        assert err.item() <= rel, (fmt, err.item())
    opt.close()


@pytest.mark.parametrize("fmt", ["bf16-moments", "int8-moments"])
def test_a_checkpoint_resumes_bit_for_bit(tmp_path, fmt):
    a, b = model_pair()
    opt = mlpo.torch.AdamW(a.parameters(), lr=LR, store=str(tmp_path),
                           state_format=fmt)
    train(a, opt, 4)
    saved_model = {k: v.clone() for k, v in a.state_dict().items()}
    sd = opt.state_dict()
    train(a, opt, 3, seed=9)
    straight = [p.detach().clone() for p in a.parameters()]
    opt.close()
    b.load_state_dict(saved_model)
    opt2 = mlpo.torch.AdamW(b.parameters(), lr=LR, store=str(tmp_path),
                            state_format=fmt)
    opt2.load_state_dict(sd)
    train(b, opt2, 3, seed=9)
    for x, y in zip(straight, b.parameters()):
        assert torch.equal(x, y)
    opt2.close()


def test_the_format_is_fixed_with_the_store(tmp_path):
    a, _ = model_pair()
    opt = mlpo.torch.AdamW(a.parameters(), lr=LR, store=str(tmp_path),
                           state_format="int8-moments")
    train(a, opt, 2)
    before = [p.detach().clone() for p in a.parameters()]
    state = opt.state[next(a.parameters())]["exp_avg"].clone()
    opt.close()
    for other in (None, "fp32", "bf16-moments"):
        with pytest.raises(ValueError, match="holds int8-moments state"):
            mlpo.torch.AdamW(a.parameters(), lr=LR, store=str(tmp_path),
                             state_format=other, resume=True)
    opt = mlpo.torch.AdamW(a.parameters(), lr=LR, store=str(tmp_path),
                           state_format="int8-moments", resume=True)
    assert torch.equal(opt.state[next(a.parameters())]["exp_avg"], state)
    for x, y in zip(before, a.parameters()):
        assert torch.equal(x, y)
    opt.close()


def test_config_key_and_contradictions(tmp_path):
    a, _ = model_pair()
    cfg = {"path": [str(tmp_path / "n")], "state_format": "bf16-moments"}
    opt = mlpo.torch.AdamW(a.parameters(), store=cfg)
    assert opt.state_format == "bf16-moments"
    opt.close()
    with pytest.raises(ValueError, match="contradicts"):
        mlpo.torch.AdamW(a.parameters(), store=cfg, state_format="fp32")
    with pytest.raises(ValueError, match="int8-moments"):
        mlpo.torch.AdamW(a.parameters(), store=str(tmp_path / "x"),
                         state_format="int8")
    toml = tmp_path / "s.toml"
    toml.write_text('state_format = "int4"\n[[path]]\nroot = "p"\n')
    with pytest.raises(ValueError, match="state_format"):
        mlpo.torch.AdamW(a.parameters(), store=str(toml))


def test_torch_state_is_quantised_on_the_way_in(tmp_path, mlpo_cli):
    a, b = model_pair()
    topt = torch.optim.AdamW(b.parameters(), lr=LR)
    train(b, topt, 3)
    a.load_state_dict(b.state_dict())
    opt = mlpo.torch.AdamW(a.named_parameters(), lr=LR, store=str(tmp_path),
                           state_format="int8-moments")
    opt.load_state_dict(topt.state_dict())
    for p, q in zip(a.parameters(), b.parameters()):
        m, tm = opt.state[p]["exp_avg"], topt.state[q]["exp_avg"]
        r, tr = (opt.state[p]["exp_avg_sq"].sqrt(),
                 topt.state[q]["exp_avg_sq"].sqrt())
        # Half a code: 1/16 of |m| (1/32 of sqrt(v)) or the block's smallest
        # code (the tensor's largest / 1.875 * 2^-17 bounds it).
        assert torch.all((m - tm).abs() <= tm.abs() / 16 +
                         tm.abs().max() * 2.0 ** -17 + 1e-30)
        assert torch.all((r - tr).abs() <= tr / 32 + tr.max() * 2.0 ** -18
                         + 1e-30)
    # Export (the checkpoint reader) dequantises to the same values and
    # names the format.
    sd = opt.state_dict()
    want = {n: opt.state[p]["exp_avg"] for n, p in a.named_parameters()}
    opt.close()
    out = tmp_path / "w.safetensors"
    r = subprocess.run([mlpo_cli, "export", os.path.join(str(tmp_path), "mlpo",
                                                       "rank-0"),
                        str(out), "--tag", sd["mlpo"]["tag"], "--moments",
                        "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["state_format"] == "int8-moments"
    tensors, meta = read_safetensors(out)
    assert meta["mlpo_state_format"] == "int8-moments"
    for n, m in want.items():
        assert np.array_equal(tensors[n + ".exp_avg"], m.numpy()), n


@pytest.mark.parametrize("fmt", ["bf16-moments", "int8-moments"])
def test_show_prints_the_moments_values(tmp_path, mlpo_cli, fmt):
    """`mlpo show` of a subgroup: int8 codes are decoded with the manifest's
    block grid and bf16 sections are values already; both give the
    statistics of the moments the optimizer holds."""
    a, _ = model_pair()
    opt = mlpo.torch.AdamW(a.named_parameters(), lr=LR, store=str(tmp_path),
                           state_format=fmt)
    train(a, opt, 3)
    for p in a[2].parameters():  # frozen: its step counts stay at 3
        p.requires_grad_(False)
        p.grad = None
    train(a, opt, 2)
    want = {k: torch.cat([opt.state[p][k].flatten()
                          for p in a.parameters()]).double()
            for k in ("exp_avg", "exp_avg_sq")}
    opt.close()
    store = os.path.join(str(tmp_path), "mlpo", "rank-0")

    def show(obj):
        r = subprocess.run([mlpo_cli, "show", store, obj, "--json"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    j = show("g0.s000000")  # the one subgroup of this small model
    assert j["state_format"] == fmt
    if fmt == "int8-moments":
        rows = {x["name"]: x for x in j["decoded"]}
        assert {x["name"]: x["dtype"] for x in j["sections"]}["m"] == "u8"
    else:
        assert j["decoded"] is None
        rows = {x["name"]: x for x in j["sections"]}
    for name, key in (("m", "exp_avg"), ("v", "exp_avg_sq")):
        t, row = want[key], rows[name]
        assert row["count"] == t.numel()
        assert row["min"] == t.min().item() and row["max"] == t.max().item()
        assert row["mean"] == pytest.approx(t.mean().item(), rel=1e-9,
                                            abs=1e-300)
        assert row["l2"] == pytest.approx(t.norm().item(), rel=1e-9)
    # The step counts (u64 in an f32 section) are shown as counts: two
    # parameters took five steps, the frozen layer's two three.
    steps = show("param_steps.n4")
    assert "decode_note" not in steps
    (t,) = steps["decoded"]
    assert (t["dtype"], t["count"], t["min"], t["max"], t["mean"]) == (
        "u64", 4, 3, 5, 4)
    # Text output says what the rows are.
    r = subprocess.run([mlpo_cli, "show", store, "g0.s000000"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert ("as values" in r.stdout) == (fmt == "int8-moments")


@pytest.mark.parametrize("fmt", ["bf16-moments", "int8-moments"])
def test_export_then_import_is_within_one_quantization_step(tmp_path, fmt):
    a, b = model_pair()
    opt = mlpo.torch.AdamW(a.named_parameters(), lr=LR,
                           store=str(tmp_path / "one"), state_format=fmt)
    train(a, opt, 5)
    out = mlpo.torch.export_state_dict(opt.state_dict())
    before = {n: (opt.state[p]["exp_avg"].clone(),
                  opt.state[p]["exp_avg_sq"].clone())
              for n, p in a.named_parameters()}
    opt.close()
    b.load_state_dict(a.state_dict())
    opt2 = mlpo.torch.AdamW(b.named_parameters(), lr=LR,
                            store=str(tmp_path / "two"), state_format=fmt)
    tb = torch.optim.AdamW(b.parameters(), lr=LR)
    tb.load_state_dict({k: out[k] for k in ("state", "param_groups")})
    opt2.load_state_dict(tb.state_dict())
    step = 1 / 256 if fmt == "bf16-moments" else 1 / 8
    for n, p in b.named_parameters():
        m0, v0 = before[n]
        m1, v1 = opt2.state[p]["exp_avg"], opt2.state[p]["exp_avg_sq"]
        assert torch.all((m1 - m0).abs() <= m0.abs() * step +
                         m0.abs().max() * 2.0 ** -16 + 1e-30), n
        assert torch.all((v1.sqrt() - v0.sqrt()).abs() <= v0.sqrt() * step +
                         v0.sqrt().max() * 2.0 ** -17 + 1e-30), n
    opt2.close()


def test_gpt_loss_in_every_format_stays_close_to_fp32():
    """examples/train_gpt.py in each format, same seeds and steps: the
    final loss (mean of the last 20 steps) within 2% of fp32's. By default
    a small model for 40 steps (one seed); scripts/test.sh --slow sets
    MLPO_FORMAT_STEPS=300 and runs the example's own model with two seeds."""
    steps = int(os.environ.get("MLPO_FORMAT_STEPS", "40"))
    long = steps >= 200
    args = [sys.executable, os.path.join(os.path.dirname(__file__), "..", "..",
                                         "bench", "format_convergence.py"),
            "--steps", str(steps), "--seeds", "0,1" if long else "0", "--json"]
    if not long:
        args += ["--", "--d-model", "64", "--layers", "2", "--heads", "2",
                 "--ctx", "64", "--batch", "8"]
    r = subprocess.run(args, capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    runs = json.loads(r.stdout)["runs"]
    assert len(runs) == (6 if long else 3)
    for run in runs:
        assert abs(run["ratio_to_fp32"] - 1) <= 0.02, run
