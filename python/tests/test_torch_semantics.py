"""mlpo.torch behaves as torch.optim does in the workflows a PyTorch user
meets first (issue 18's seven reproductions), each against torch.optim's own
AdamW run beside it on a copy of the model."""
import copy
import os
import subprocess
import sys
import warnings

import pytest
import torch

import mlpo.torch as mt
from helpers import make_model, loss_of, max_diff


def step_both(pairs, step, frozen=()):
    """One training step of each (model, optimizer) pair on the same batch;
    parameters named in `frozen` get no gradient."""
    for m, o in pairs:
        o.zero_grad(set_to_none=True)
        loss_of(m, step).backward()
        for n, p in m.named_parameters():
            if n in frozen:
                p.grad = None
        o.step()


def test_a_new_optimizer_starts_fresh_and_resume_continues(tmp_path):
    """Repro 1: a rerun in the same folder used to continue the last run."""
    store = str(tmp_path / "s")
    model = make_model()
    opt = mt.AdamW(model.parameters(), lr=1e-2, store=store)
    for s in range(5):
        step_both([(model, opt)], s)
    trained = copy.deepcopy(model)
    opt.close()
    # The script run again: new weights, step 0, the same as torch.
    model2 = make_model(seed=1)
    ref = copy.deepcopy(model2)
    opt2 = mt.AdamW(model2.parameters(), lr=1e-2, store=store)
    assert opt2.step_count == 0
    assert max_diff(model2, ref) == 0  # not replaced by the old masters
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for s in range(3):
        step_both([(model2, opt2), (ref, ropt)], s)
    assert opt2.step_count == 3
    assert max_diff(model2, ref) <= 1e-6
    opt2.close()
    # resume=True continues the newest run, and says so once.
    model3 = make_model(seed=2)
    opt3 = mt.AdamW(model3.parameters(), lr=1e-2, store=store, resume=True)
    assert opt3.step_count == 3
    assert max_diff(model3, model2) == 0
    assert max_diff(model3, trained) > 0


def test_the_toml_name_is_used_and_a_contradicting_keyword_refused(tmp_path):
    for n in ("exp1", "exp2"):
        (tmp_path / f"{n}.toml").write_text(
            f'name = "{n}"\n[[path]]\nroot = "data"\n')
    m1, m2 = make_model(), make_model()
    o1 = mt.AdamW(m1.parameters(), store=str(tmp_path / "exp1.toml"))
    o2 = mt.AdamW(m2.parameters(), store=str(tmp_path / "exp2.toml"))
    step_both([(m1, o1)], 0)
    assert (o1.store_name, o2.store_name) == ("exp1", "exp2")
    assert o2.step_count == 0
    assert os.path.isdir(tmp_path / "data" / "exp2")
    with pytest.raises(ValueError, match="contradicts"):
        mt.AdamW(make_model().parameters(), store=str(tmp_path / "exp1.toml"),
                 name="other")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weights_changed_after_construction_are_kept(store_dir, dtype):
    """Repro 2: load_state_dict(pretrained) after building the optimizer,
    clamping and re-initialisation used to be reverted at the next step."""
    model = make_model(dtype=dtype)
    opt = mt.AdamW(model.parameters(), lr=1e-2, store=store_dir)
    pretrained = make_model(seed=7, dtype=dtype).state_dict()
    model.load_state_dict(pretrained)        # after the optimizer was made
    master = [p.detach().float().clone().requires_grad_(True)
              for p in model.parameters()]
    ref = torch.optim.AdamW(master, lr=1e-2)

    def both(step):
        opt.zero_grad()
        loss_of(model, step, dtype=dtype).backward()
        for p, q in zip(model.parameters(), master):
            q.grad = p.grad.float()
        opt.step()
        ref.step()

    tol = 1e-6 if dtype == torch.float32 else 1e-2
    both(0)
    for p, q in zip(model.parameters(), master):
        assert (p.float() - q).abs().max() <= tol
    with torch.no_grad():
        model[0].weight.clamp_(-0.05, 0.05)  # clamping
        master[0].clamp_(-0.05, 0.05)
        torch.nn.init.zeros_(model[2].bias)  # re-initialisation
        master[3].zero_()
        model[2].weight.data.mul_(0.5)       # an edit through .data
        master[2].mul_(0.5)
        if dtype == torch.bfloat16:          # the master is what bf16 holds
            for p, q in zip(model.parameters(), master):
                changed = p.float() != q.bfloat16().float()
                q[changed] = p.float()[changed]
    for s in range(1, 4):
        both(s)
        for p, q in zip(model.parameters(), master):
            assert (p.float() - q).abs().max() <= tol, s


def test_frozen_and_unused_parameters_are_skipped(store_dir):
    """Repro 3: a parameter without a gradient used to move (decay and
    momentum with a zero gradient)."""
    model = make_model()
    ref = copy.deepcopy(model)
    opt = mt.AdamW(model.named_parameters(), lr=1e-2, weight_decay=0.1,
                   store=store_dir)
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    schedule = [(), ("0.weight",), ("0.weight", "2.bias"), (), ("2.weight",)]
    for s, frozen in enumerate(schedule):
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        step_both([(model, opt), (ref, ropt)], s, frozen)
        assert max_diff(model, ref) <= 1e-6, s
        for n, p in model.named_parameters():
            if n in frozen:
                assert torch.equal(p, before[n]), (s, n)
    # Each parameter's own step count, as torch keeps it.
    for p, q in zip(model.parameters(), ref.parameters()):
        assert float(opt.state[p]["step"]) == float(ropt.state[q]["step"])
    # A parameter that never had a gradient has no state, as in torch.
    extra = torch.nn.Parameter(torch.ones(3))
    o2 = mt.AdamW([extra] + list(make_model().parameters()),
                  store=store_dir + "2")
    o2.step()  # no gradient anywhere: nothing happens
    assert o2.step_count == 0 and torch.equal(extra, torch.ones(3))


def test_several_optimizers_share_a_store(store_dir):
    """Repro 4: a GAN's two optimizers, a notebook cell run again."""
    gen, disc = make_model(seed=1), make_model(seed=2)
    rg, rd = copy.deepcopy(gen), copy.deepcopy(disc)
    og = mt.AdamW(gen.parameters(), lr=1e-2, store=store_dir)
    od = mt.AdamW(disc.parameters(), lr=2e-2, store=store_dir)
    assert og.store_name != od.store_name
    rog = torch.optim.AdamW(rg.parameters(), lr=1e-2)
    rod = torch.optim.AdamW(rd.parameters(), lr=2e-2)
    for s in range(3):
        step_both([(gen, og), (rg, rog)], s)
        step_both([(disc, od), (rd, rod)], 100 + s)
    assert max_diff(gen, rg) <= 1e-6 and max_diff(disc, rd) <= 1e-6
    sd_g, sd_d = og.state_dict(), od.state_dict()
    # A notebook cell run again: the old optimizer is unreachable but not
    # closed (a reference cycle keeps it until a collection).
    cycle = [og]
    cycle.append(cycle)
    del og, cycle
    og2 = mt.AdamW(gen.parameters(), lr=1e-2, store=store_dir)
    assert og2.store_name == sd_g["mlpo"]["store_name"]
    assert og2.step_count == 0
    og2.load_state_dict(sd_g)
    assert og2.step_count == 3
    # The discriminator's checkpoint is loaded by a rebuilt optimizer while
    # the old one is alive: its tag is copied in, never shared.
    od2 = mt.AdamW(disc.parameters(), lr=2e-2, store=store_dir)
    od2.load_state_dict(sd_d)
    assert od2.step_count == 3
    for p, q in zip(od2.state, od.state):
        assert torch.equal(od2.state[p]["exp_avg"], od.state[q]["exp_avg"])


def test_state_is_readable_and_groups_dtypes_layouts_work(store_dir):
    """Repro 5: opt.state, add_param_group, mixed dtypes, channels_last."""
    model = make_model()
    ref = copy.deepcopy(model)
    opt = mt.AdamW(model[0].parameters(), lr=1e-2, store=store_dir)
    ropt = torch.optim.AdamW(ref[0].parameters(), lr=1e-2)
    assert len(opt.state) == 0
    for s in range(2):
        step_both([(model, opt), (ref, ropt)], s)
    opt.add_param_group({"params": model[2].parameters(), "lr": 5e-3})
    ropt.add_param_group({"params": ref[2].parameters(), "lr": 5e-3})
    for s in range(2, 5):
        step_both([(model, opt), (ref, ropt)], s)
    assert max_diff(model, ref) <= 1e-6
    assert len(opt.state) == len(ropt.state) == 4
    for p, q in zip(model.parameters(), ref.parameters()):
        mine, theirs = opt.state[p], ropt.state[q]
        assert float(mine["step"]) == float(theirs["step"])
        for k in ("exp_avg", "exp_avg_sq"):
            assert (mine[k] - theirs[k]).abs().max() <= 1e-6, k
    # As torch.optim's defaultdict: {} for a tensor that has no state.
    stranger = torch.nn.Parameter(torch.zeros(1))
    assert opt.state[stranger] == ropt.state[stranger] == {}
    assert stranger not in opt.state
    # bf16 weights with fp32 norms; a channels_last convolution.
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(),
                              torch.nn.LayerNorm(4 * 4 * 4))
    net[0].to(memory_format=torch.channels_last)
    net[0].to(torch.bfloat16)
    assert not net[0].weight.is_contiguous()
    master = [p.detach().float().clone().requires_grad_(True)
              for p in net.parameters()]
    opt = mt.AdamW(net.parameters(), lr=1e-2, store=store_dir + "2")
    ropt = torch.optim.AdamW(master, lr=1e-2)
    x = torch.randn(2, 3, 6, 6)
    for s in range(3):
        opt.zero_grad()
        h = net[0](x.bfloat16().contiguous(memory_format=torch.channels_last))
        net[2](net[1](h.float())).pow(2).mean().backward()
        for p, q in zip(net.parameters(), master):
            q.grad = p.grad.float()
        opt.step()
        ropt.step()
    for p, q in zip(net.parameters(), master):
        tol = 1e-6 if p.dtype == torch.float32 else 1e-2
        assert (p.float() - q).abs().max() <= tol
    assert net[0].weight.dtype == torch.bfloat16
    assert net[2].weight.dtype == torch.float32
    st = opt.state[net[0].weight]["exp_avg"]
    rst = ropt.state[master[0]]["exp_avg"]
    assert (st - rst).abs().max() <= 1e-6


def test_checkpoints_are_kept_and_misuse_is_loud(store_dir):
    """Repro 6: retention, torch.optim loading an mlpo dict, skipped steps."""
    model = make_model()
    opt = mt.AdamW(model.parameters(), lr=1e-2, store=store_dir)
    dicts = []
    for s in range(5):
        step_both([(model, opt)], s)
        dicts.append(opt.state_dict())
    for sd in dicts:  # every checkpoint still loads
        opt.load_state_dict(sd)
        assert opt.step_count == sd["mlpo"]["step"]
    with pytest.raises(ValueError):
        torch.optim.AdamW(make_model().parameters()).load_state_dict(dicts[0])
    opt.close()
    m2 = make_model()
    o2 = mt.AdamW(m2.parameters(), store=store_dir + "2", keep_checkpoints=2)
    kept = []
    for s in range(4):
        step_both([(m2, o2)], s)
        kept.append(o2.state_dict())
    with pytest.raises(ValueError, match="keep_checkpoints=2"):
        o2.load_state_dict(kept[0])
    o2.load_state_dict(kept[-2])
    # An overflow skips the step and warns, with the count.
    o2.zero_grad()
    loss_of(m2, 9).backward()
    next(m2.parameters()).grad[0, 0] = float("inf")
    with pytest.warns(RuntimeWarning, match="skipped so far"):
        o2.step()
    assert o2.skipped_steps == 1


def test_a_small_model_makes_a_small_store(tmp_path):
    """Repro 7 (size): segments are sized to the state."""
    store = tmp_path / "s"
    model = torch.nn.Linear(40, 40)
    opt = mt.AdamW(model.parameters(), store=str(store))
    step_both_linear = [(model, opt)]
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(2, 40)).sum().backward()
        opt.step()
    opt.state_dict()
    opt.close()
    used = sum(os.path.getsize(os.path.join(d, f))
               for d, _, fs in os.walk(store) for f in fs)
    assert used < 64 << 20, used
    del step_both_linear


RERUN = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
import mlpo.torch as mt
torch.manual_seed(int(sys.argv[2]))
m = torch.nn.Linear(8, 4)
w0 = m.weight.detach().clone()
opt = mt.AdamW(m.parameters(), lr=1e-2, store=sys.argv[3])
for _ in range(3):
    opt.zero_grad(); m(torch.randn(4, 8)).sum().backward(); opt.step()
print(opt.step_count, opt.store_name)
"""


def test_a_script_run_twice_starts_twice(tmp_path, build_python_path):
    script = tmp_path / "train.py"
    script.write_text(RERUN)
    outs = [subprocess.run([sys.executable, str(script), build_python_path,
                            str(seed), str(tmp_path / "s")],
                           capture_output=True, text=True, check=True).stdout
            for seed in (0, 1)]
    assert outs == ["3 mlpo\n", "3 mlpo\n"]


def test_edits_reach_the_device_path(store_dir):
    """The device path (here its host backend, the same code as CUDA's) sees
    edits by the tensors' version counters: before the first step and
    between steps."""
    model = make_model()
    opt = mt.AdamW(model.parameters(), lr=1e-2, store=store_dir,
                   device_backend="host")
    model.load_state_dict(make_model(seed=5).state_dict())
    ref = copy.deepcopy(model)
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    step_both([(model, opt), (ref, ropt)], 0)
    assert max_diff(model, ref) <= 1e-6
    with torch.no_grad():
        for m in (model, ref):
            m[0].weight.clamp_(-0.05, 0.05)
            torch.nn.init.ones_(m[2].bias)
    sd = opt.state_dict()  # the edits are in the checkpoint
    for s in range(1, 3):
        step_both([(model, opt), (ref, ropt)], s)
        assert max_diff(model, ref) <= 1e-6, s
    opt.load_state_dict(sd)
    assert torch.equal(model[2].bias, torch.ones(8))
    assert model[0].weight.abs().max() <= 0.05


DIES = r"""
import atexit, os, sys, torch
atexit.register(os._exit, 7)  # runs after mlpo's own exit handler: a
sys.path.insert(0, sys.argv[1])  # process that dies in its teardown (a
import mlpo.torch as mt  # gloo rank once did, SIGABRT) before __del__
torch.manual_seed(0)
m = torch.nn.Linear(8, 8)
opt = mt.AdamW(m.parameters(), lr=1e-2, store=sys.argv[2],
               resume=sys.argv[3] == "1")
for _ in range(3):
    opt.zero_grad(); m(torch.randn(4, 8)).sum().backward(); opt.step()
print(opt.step_count, flush=True)
raise RuntimeError("the script fails after its steps")
"""


def test_a_script_that_dies_without_close_keeps_its_steps(tmp_path,
                                                           build_python_path):
    """A script that raises after its steps, without close(), and whose
    process then dies in the interpreter's teardown: under the default
    durability ("tag") its steps were in the store only if __del__ had run
    (a rank of a data-parallel test once resumed at step 0 beside one at
    step 3). mlpo closes its optimizers at exit, before the teardown."""
    script = tmp_path / "dies.py"
    script.write_text(DIES)
    for resume, want in (("0", "3"), ("1", "6")):
        r = subprocess.run([sys.executable, str(script), build_python_path,
                            str(tmp_path / "s"), resume],
                           capture_output=True, text=True)
        assert r.returncode == 7, r.stderr[-2000:]
        assert r.stdout.split() == [want], r.stderr[-2000:]
