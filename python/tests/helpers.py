"""Small deterministic models and data for the adapter's tests."""
import torch


def make_model(seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                            torch.nn.Linear(32, 8))
    return m.to(dtype)


def two_groups(model, wd=0.1, named=False):
    """Weights with weight decay, biases without (as training scripts do)."""
    items = list(model.named_parameters())
    pick = (lambda n, p: (n, p)) if named else (lambda n, p: p)
    decay = [pick(n, p) for n, p in items if n.endswith("weight")]
    no_decay = [pick(n, p) for n, p in items if n.endswith("bias")]
    return [{"params": decay, "weight_decay": wd},
            {"params": no_decay, "weight_decay": 0.0}]


def batch(step, n=8, dtype=torch.float32):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(n, 16, generator=g)
    y = torch.randn(n, 8, generator=g)
    return x.to(dtype), y.to(dtype)


def loss_of(model, step, dtype=torch.float32, part=None, parts=1):
    x, y = batch(step, dtype=dtype)
    if part is not None:
        k = x.shape[0] // parts
        x, y = x[part * k:(part + 1) * k], y[part * k:(part + 1) * k]
    return ((model(x) - y) ** 2).mean()


def max_diff(a, b):
    return max((p.detach().float() - q.detach().float()).abs().max().item()
               for p, q in zip(a.parameters(), b.parameters()))


def assert_params_are(model, want):
    """Each of `model`'s parameters equals want[name] exactly."""
    for n, p in model.named_parameters():
        assert torch.equal(p, want[n]), n


def dcp_save(path, model, opt, how="sync"):
    """model and optimizer through torch.distributed.checkpoint, the way
    torchtitan saves: get_state_dict, then dcp.save (or async_save)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    msd, osd = get_state_dict(model, opt)
    sd = {"model": msd, "optim": osd}
    if how == "async":
        dcp.async_save(sd, checkpoint_id=str(path)).result()
    else:
        dcp.save(sd, checkpoint_id=str(path))


def dcp_load(path, model, opt):
    """The other way: get_state_dict as the template, dcp.load into it,
    set_state_dict."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, \
        set_state_dict
    msd, osd = get_state_dict(model, opt)
    sd = {"model": msd, "optim": osd}
    dcp.load(sd, checkpoint_id=str(path))
    set_state_dict(model, opt, model_state_dict=sd["model"],
                   optim_state_dict=sd["optim"])
