"""Bad inputs: each is a Python exception that names the problem, and the
store keeps its last committed state."""
import copy
import io
import json
import os
import shutil
import subprocess
import warnings

import pytest
import torch

import mlpo.torch as mt
from helpers import make_model, loss_of, assert_params_are


def trained(store, steps=3):
    model = make_model()
    opt = mt.AdamW(model.named_parameters(), lr=1e-2, store=store)
    for s in range(steps):
        opt.zero_grad()
        loss_of(model, s).backward()
        opt.step()
    return model, opt


def test_unsupported_flags(store_dir):
    model = make_model()
    with pytest.raises(ValueError, match="capturable"):
        mt.AdamW(model.parameters(), capturable=True, store=store_dir)
    with pytest.raises(ValueError, match="capturable"):
        mt.Adam(model.parameters(), capturable=True, store=store_dir)
    with pytest.raises(ValueError, match="betas"):
        mt.AdamW(model.parameters(), betas=(0.9, 1.5), store=store_dir)


@pytest.mark.parametrize("key", ["capturable", "differentiable"])
def test_unsupported_options_are_refused_wherever_they_are_set(
        store_dir, key):
    """torch.optim lets a user set these in a group dict, by editing
    param_groups, in add_param_group and through a loaded state dict; mlpo
    accepted them there and ran as if unset, silently. Each place now
    refuses with nothing changed. foreach and fused are accepted: mlpo's
    update is always one fused kernel (maximize is honoured:
    test_torch2_contract.py; amsgrad: test_rules.py)."""
    model = make_model()
    with pytest.raises(ValueError, match=f"param group 1: {key}"):
        mt.AdamW([{"params": model[0].parameters()},
                  {"params": model[2].parameters(), key: True}],
                 store=store_dir)
    opt = mt.AdamW([{"params": model[0].parameters()}], lr=1e-2,
                   store=store_dir, fused=True, foreach=True)
    assert opt.param_groups[0]["fused"] and opt.param_groups[0]["foreach"]
    loss_of(model, 0).backward()
    opt.step()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt.param_groups[0][key] = True
    loss_of(model, 1).backward()
    with pytest.raises(ValueError, match=f"step\\(\\): param group 0: {key}"):
        opt.step()
    assert_params_are(model, before)
    assert opt.step_count == 1
    opt.param_groups[0][key] = False
    with pytest.raises(ValueError, match=f"add_param_group: {key}"):
        opt.add_param_group({"params": model[2].parameters(), key: True})
    assert len(opt.param_groups) == 1
    # A torch.optim dict with the option set (torch takes all four).
    ref = torch.optim.AdamW(make_model()[0].parameters(), **{key: True})
    sd = ref.state_dict()
    with pytest.raises(ValueError, match=f"load_state_dict: .*{key}"):
        opt.load_state_dict(sd)
    opt.step()  # still usable, at its own state
    assert opt.step_count == 2


def test_sparse_gradient_is_refused_and_the_state_stays(store_dir):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 4, sparse=True)
    opt = mt.AdamW(emb.parameters(), lr=1e-2, store=store_dir)
    emb.weight.grad = torch.ones(10, 4)
    opt.step()
    before = emb.weight.detach().clone()
    opt.zero_grad(set_to_none=True)
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        opt.step()
    assert opt.step_count == 1
    assert torch.equal(before, emb.weight.detach())


def test_a_parameter_that_changes_shape_or_dtype_is_named(store_dir):
    model, opt = trained(store_dir)
    w = model[0].weight
    w.data = torch.zeros(5, 5)
    w.grad = torch.zeros(5, 5)
    with pytest.raises(ValueError, match=r"0\.weight changed"):
        opt.step()
    assert opt.step_count == 3
    w.data = torch.zeros(32, 16, dtype=torch.float64)
    w.grad = torch.zeros(32, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"0\.weight changed"):
        opt.step()
    assert opt.step_count == 3


def test_unsupported_device_and_layout(store_dir):
    meta = torch.nn.Linear(4, 4, device="meta")
    with pytest.raises(ValueError, match="meta"):
        mt.AdamW(meta.parameters(), store=store_dir)
    ints = torch.nn.Parameter(torch.zeros(4, dtype=torch.int64),
                              requires_grad=False)
    with pytest.raises(ValueError, match="int64; mlpo takes float32"):
        mt.AdamW([ints], store=store_dir)
    # (gaps in memory, float64 and complex are taken: test_rules.py)


def test_state_dict_of_another_store_or_a_missing_tag(tmp_path):
    _, a = trained(str(tmp_path / "a"))
    sd_a = a.state_dict()
    model_b, b = trained(str(tmp_path / "b"))
    with pytest.raises(ValueError, match="another store"):
        b.load_state_dict(sd_a)
    assert b.step_count == 3
    sd_b = b.state_dict()
    b.checkpoint("keep")
    b._engine.drop_tag(sd_b["mlpo"]["tag"])
    with pytest.raises(ValueError, match="no tag 'step-3'"):
        b.load_state_dict(sd_b)
    assert b.step_count == 3
    b.restore("keep")  # the store is intact and usable
    assert b.step_count == 3


def test_missing_store_directory_and_config(tmp_path, store_dir):
    model, opt = trained(store_dir)
    sd = opt.state_dict()
    opt.close()
    with pytest.raises(FileNotFoundError):
        mt.AdamW(make_model().parameters(), store=str(tmp_path / "no.toml"))
    shutil.rmtree(store_dir)
    with pytest.raises(Exception, match="no index|does not exist"):
        mt.export_state_dict(sd)


def test_a_store_path_with_a_missing_parent_is_named_and_not_made(tmp_path):
    # A mistyped mount point (/lustr/... for /lustre/...) must not become a
    # directory tree on another disk: the path is made, never its parents,
    # in a list, a dict and a TOML config alike.
    good = tmp_path / "nvme"
    typo = tmp_path / "lustr" / "me" / "ckpt"
    toml = tmp_path / "store.toml"
    toml.write_text(f'[[path]]\nroot = "{good}"\n'
                    f'[[path]]\nroot = "lustr/me/ckpt"\nkind = "pfs"\n')
    for store in ([str(good), str(typo)],
                  {"path": [str(good), {"root": str(typo), "kind": "pfs"}]},
                  str(toml)):
        with pytest.raises(FileNotFoundError) as e:
            mt.AdamW(make_model().parameters(), store=store)
        assert str(tmp_path / "lustr" / "me") in str(e.value)
        assert "parent" in str(e.value)
        assert not (tmp_path / "lustr").exists()
    # The path itself is made when its parent exists, and the optimizer
    # steps there.
    model, opt = trained([str(good), str(tmp_path / "pfs")])
    assert (tmp_path / "pfs").is_dir() and opt.step_count > 0
    opt.close()


def test_a_dicts_single_path_is_one_path(tmp_path):
    """{"path": "dir"} (a string where a list goes) is the one path it names,
    not a path per character (which made "/" a store path twice)."""
    for i, one in enumerate((str(tmp_path / "a"), {"root": str(tmp_path / "b")})):
        model, opt = trained({"path": one, "durability": "tag"})
        where = one if isinstance(one, str) else one["root"]
        assert os.path.isdir(os.path.join(where, ".mlpo"))
        opt.close()


def test_another_model_in_the_same_store_gets_its_own_namespace(store_dir):
    model, opt = trained(store_dir)
    sd = opt.state_dict()
    opt.close()
    other = torch.nn.Linear(16, 3)
    o2 = mt.AdamW(other.named_parameters(), store=store_dir)
    assert o2.store_name == "mlpo.2"
    # The first model's checkpoint still loads, in its own namespace.
    fresh = mt.AdamW(model.named_parameters(), store=store_dir)
    assert fresh.store_name == "mlpo" and fresh.step_count == 0
    fresh.load_state_dict(sd)
    assert fresh.step_count == 3
    # A state dict of another model is refused.
    with pytest.raises(ValueError, match="another model|other parameter"):
        o2.load_state_dict(sd)


def test_a_misspelt_store_option_names_the_key(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text('[[path]]\nroot = "d"\nread_cpa = "1G"\n')
    with pytest.raises(ValueError, match="read_cpa"):
        mt.AdamW(make_model().parameters(), store=str(cfg))


@pytest.mark.parametrize("manifest", ['{"world": 1}', "not json {",
                                      '{"params": [{"shape": [3]}]}'])
def test_an_unreadable_manifest_is_named_and_the_state_kept(
        store_dir, mlpo_cli, manifest):
    """A namespace whose parameter manifest cannot be read (edited by hand,
    written by a broken tool) is neither taken for another model's (a fresh
    namespace beside it) nor a bare KeyError: an error naming the manifest,
    with the committed state untouched."""
    model, opt = trained(store_dir)
    opt._engine.set_attribute("manifest", manifest)
    opt.close()
    rank0 = os.path.join(store_dir, "mlpo", "rank-0")

    def heads():
        r = subprocess.run([mlpo_cli, "ls", rank0, "--json"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return [(o["name"], o["head"], o["head_step"])
                for o in json.loads(r.stdout)["objects"]]

    before = heads()
    assert before and all(step == 3 for _, _, step in before)
    for resume in (True, False):
        with pytest.raises(RuntimeError, match="parameter manifest"):
            mt.AdamW(make_model().named_parameters(), lr=1e-2,
                     store=store_dir, resume=resume)
    assert not os.path.exists(os.path.join(store_dir, "mlpo.2"))
    assert heads() == before


def test_resume_with_another_subgroup_numel_is_refused_naming_the_size(
        store_dir, capsys):
    """Found by a probe: resume=True with another subgroup_numel (the
    namespace's objects then have another size) started a fresh state in
    "mlpo.2", printing only "nothing to resume". Now it is a ValueError
    saying what to pass, nothing changes, and passing it resumes."""
    model, opt = trained(store_dir, steps=3)
    opt.close()
    want = {n: p.detach().clone() for n, p in model.named_parameters()}
    m2 = make_model(seed=1)
    with pytest.raises(ValueError, match="subgroup_numel") as e:
        mt.AdamW(m2.named_parameters(), lr=1e-2, store=store_dir,
                 resume=True, subgroup_numel=100)
    # "its first object is {p:f32[N], ..." : N is a size that resumes it.
    n = int(str(e.value).split("p:f32[")[1].split("]")[0])
    for name, p in m2.named_parameters():
        assert not torch.equal(p, want[name]), name  # nothing was loaded
    o2 = mt.AdamW(m2.named_parameters(), lr=1e-2, store=store_dir,
                  resume=True, subgroup_numel=n)
    assert o2.store_name == "mlpo"
    for name, p in m2.named_parameters():
        assert torch.equal(p, want[name]), name
    assert o2.state[next(m2.parameters())]["step"].item() == 3
    o2.close()
    # Not resuming, the same change is a fresh state of its own, as asked.
    m3 = make_model()
    o3 = mt.AdamW(m3.named_parameters(), lr=1e-2, store=store_dir,
                  subgroup_numel=100)
    assert o3.store_name == "mlpo.2"
    o3.close()


def test_resume_of_another_model_says_what_it_passed_over(store_dir, capsys):
    """A changed model resumes nothing (its state is another model's), and
    the note printed says which namespace held what, not only "nothing to
    resume"."""
    _, opt = trained(store_dir, steps=2)
    opt.close()
    capsys.readouterr()
    torch.manual_seed(0)
    other = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 4))
    o = mt.AdamW(other.named_parameters(), lr=1e-2, store=store_dir,
                 resume=True)
    err = capsys.readouterr().err
    assert o.store_name == "mlpo.2"
    assert "nothing to resume" in err, err
    assert "passed over: 'mlpo' holds another model" in err, err
    assert "'2.weight' of shape [8, 32]" in err, err
    o.close()


def test_a_parameter_twice_in_a_group_is_warned_like_torch(store_dir):
    """torch.optim warns and keeps the duplicate (updating it twice a
    step); mlpo warns with torch's words, keeps it once (one tensor, one
    state in the store) and says so, from the constructor and from
    add_param_group. The run equals torch.optim's with it listed once."""
    model = make_model()
    ref = make_model()
    ref.load_state_dict(model.state_dict())
    w, b = model[0].weight, model[0].bias
    with pytest.warns(UserWarning, match="duplicate parameters") as torch_w:
        torch.optim.AdamW([ref[0].weight, ref[0].bias, ref[0].weight])
    with pytest.warns(UserWarning, match="duplicate parameters") as ours:
        opt = mt.AdamW([("a", w), ("b", b), ("a", w)], lr=1e-2,
                       store=store_dir)
    said = str(ours[0].message)
    assert said.startswith(str(torch_w[0].message)), said
    assert "keeps the parameter once: 'a'" in said, said
    assert len(opt.param_groups[0]["params"]) == 2
    ro = torch.optim.AdamW([ref[0].weight, ref[0].bias], lr=1e-2)
    x = torch.randn(4, 16)
    for o, m in ((opt, model), (ro, ref)):
        m(x).pow(2).mean().backward()
        o.step()
    assert torch.allclose(w, ref[0].weight, atol=1e-6)
    extra = torch.nn.Linear(4, 4)
    with pytest.warns(UserWarning, match="duplicate parameters"):
        opt.add_param_group({"params": [("e", extra.weight),
                                        ("e", extra.weight)]})
    assert len(opt.param_groups[1]["params"]) == 1
    opt.close()


@pytest.mark.parametrize("key, value, says", [
    ("weight_decay", None, "weight_decay is None, not a number"),
    ("lr", "fast", "lr is 'fast', not a number"),
    ("eps", torch.ones(2), "eps is tensor"),
    ("betas", 0.9, "betas is 0.9, not a pair"),
    ("betas", (0.9, "x"), "betas[1] is 'x'"),
])
def test_a_hyperparameter_set_to_a_non_number_is_named_at_step(
        store_dir, key, value, says):
    """A hyperparameter changed through param_groups (as a scheduler or a
    user does) to something that is not a number: a ValueError naming the
    group and key (not float()'s bare TypeError), nothing changes, and the
    optimizer steps on once it is set right. A 0-d tensor lr, as some
    schedulers set, is a number."""
    model, opt = trained(store_dir, 2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    good = opt.param_groups[0][key]
    opt.param_groups[0][key] = value
    opt.zero_grad()
    loss_of(model, 2).backward()
    with pytest.raises(ValueError, match=f"param group 0's {key}"):
        opt.step()
    with pytest.raises(ValueError) as e:
        opt.step()
    assert says in str(e.value), e.value
    assert_params_are(model, before)
    opt.param_groups[0][key] = good
    if key == "lr":
        opt.param_groups[0]["lr"] = torch.tensor(good)
    opt.step()
    assert opt.state[model[0].weight]["step"] == 3
    assert not torch.equal(model[0].weight, before["0.weight"])
    opt.close()


def test_copying_or_pickling_the_optimizer_is_refused_naming_state_dict(
        store_dir, tmp_path):
    """torch.optim's optimizers pickle with their state; mlpo's is in the
    store. A copy used to come back without its engine and fail at its
    first use with an AttributeError; the copy is refused instead, and the
    optimizer trains on."""
    import copy
    import pickle
    model, opt = trained(store_dir)
    for f in (copy.deepcopy, copy.copy, pickle.dumps,
              lambda o: torch.save(o, tmp_path / "opt.pt")):
        with pytest.raises(TypeError, match="state_dict"):
            f(opt)
    before = [p.detach().clone() for p in model.parameters()]
    opt.zero_grad()
    loss_of(model, 3).backward()
    opt.step()
    assert opt.step_count == 4
    assert any(not torch.equal(a, p) for a, p in
               zip(before, model.parameters()))
    opt.close()


def test_a_bad_key_or_value_in_a_store_config_names_the_file(tmp_path):
    """A typo in a TOML config file is named with the file it is in (the
    engine saw only the text); a store= dict is named as such. Nothing is
    created in the store's paths, and a path that does not exist yet is not
    made."""
    (tmp_path / "nv").mkdir()
    model = make_model()
    nv = '[[path]]\nroot = "nv"\n'
    for text, key in (('cach = "1G"\n' + nv, "cach"),
                      ("extent_bytes = 7\n" + nv, "extent_bytes"),
                      (nv + '[[path]]\nroot = "pf"\nkind = "nvm"\n',
                       "path[1].kind")):
        cfg = tmp_path / "run.toml"
        cfg.write_text(text)
        with pytest.raises(ValueError) as e:
            mt.AdamW(model.parameters(), store=str(cfg))
        assert str(cfg) in str(e.value) and f"'{key}'" in str(e.value)
    with pytest.raises(ValueError, match=r"store= dict.*'cach'"):
        mt.AdamW(model.parameters(),
                 store={"path": [str(tmp_path / "nv"), str(tmp_path / "new")],
                        "cach": 1})
    assert os.listdir(tmp_path / "nv") == []
    # A path the config would make is not made for a config that is refused.
    assert not (tmp_path / "pf").exists() and not (tmp_path / "new").exists()


def test_params_edited_in_a_group_by_hand_are_refused_at_step(store_dir):
    """torch.optim updates whatever a group's 'params' list holds at step();
    mlpo lays its store out once, so a parameter appended there was left
    out of the update without a word (and one removed was still updated).
    step() refuses, changing nothing, until the list is as it was."""
    model, opt = trained(store_dir)
    extra = torch.nn.Parameter(torch.ones(3))
    before = [p.detach().clone() for p in model.parameters()]
    for edit, undo in (
            (lambda ps: ps.append(extra), lambda ps: ps.pop()),
            (lambda ps: ps.pop(), None),
            (lambda ps: ps.__setitem__(0, extra), None)):
        ps = opt.param_groups[0]["params"]
        kept = list(ps)
        edit(ps)
        opt.zero_grad()
        loss_of(model, 3).backward()
        extra.grad = torch.ones(3)
        with pytest.raises(ValueError, match="param group 0's 'params'"):
            opt.step()
        assert opt.step_count == 3
        assert all(torch.equal(a, p) for a, p in
                   zip(before, model.parameters()))
        assert torch.equal(extra, torch.ones(3))
        ps[:] = kept
    opt.param_groups.append(dict(opt.param_groups[0], params=[extra]))
    with pytest.raises(ValueError, match="add_param_group"):
        opt.step()
    opt.param_groups.pop()
    opt.step()
    assert opt.step_count == 4
    opt.close()


def test_assigning_to_or_deleting_from_opt_state_is_refused(store_dir):
    """torch.optim code resets a parameter's moments with `opt.state[p] =
    {}` or `del opt.state[p]`; on mlpo's read-only view that failed with an
    unrelated TypeError about tensor indices. It is refused naming what
    moves state in and out, and the state stays."""
    model, opt = trained(store_dir)
    w = next(model.parameters())
    m = opt.state[w]["exp_avg"].clone()
    for f in (lambda: opt.state.__setitem__(w, {}),
              lambda: opt.state.__delitem__(w)):
        with pytest.raises(TypeError, match="opt.state is read from the "
                                            "store.*load_state_dict"):
            f()
    assert torch.equal(opt.state[w]["exp_avg"], m)
    opt.close()


def test_an_in_place_edit_of_opt_state_warns_and_the_way_it_names_works(
        store_dir):
    """torch.optim code resets moments in place (`opt.state[p]['exp_avg']
    .zero_()`); mlpo's opt.state hands out copies, so that changed nothing
    without a word. The edit warns, naming the way that works:
    export_state_dict, edited, then load_state_dict. Reading, computing
    from and saving the copies stays quiet and plain."""
    model, opt = trained(store_dir)
    w = next(model.parameters())
    before = opt.state[w]["exp_avg"].clone()
    for edit in (lambda s: s["exp_avg"].zero_(),
                 lambda s: s["exp_avg_sq"].__setitem__(0, 1.0),
                 lambda s: s["step"].add_(1)):
        with pytest.warns(UserWarning, match=r"copies read from the store: "
                          r".* changed only this copy.*export_state_dict"):
            edit(opt.state[w])
    assert torch.equal(opt.state[w]["exp_avg"], before)  # the store's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = opt.state[w]
        derived = s["exp_avg"] * 2 + s["exp_avg_sq"].sqrt()
        derived.add_(1)  # a plain tensor of the user's own
        assert type(derived) is torch.Tensor and \
            type(copy.deepcopy(s["exp_avg"])) is torch.Tensor
        assert repr(s["step"]) == "tensor(3.)"
        buf = io.BytesIO()
        torch.save(dict(s), buf)
        buf.seek(0)
        assert type(torch.load(buf)["exp_avg"]) is torch.Tensor
        assert torch.equal(s["exp_avg"], before) and float(s["step"]) == 3
    sd = mt.export_state_dict(opt.state_dict())
    i = next(i for i, s in sd["state"].items()
             if s["exp_avg"].shape == w.shape)
    sd["state"][i]["exp_avg"].zero_()
    opt.load_state_dict(sd)
    assert torch.count_nonzero(opt.state[w]["exp_avg"]) == 0
    opt.close()


def test_a_store_given_another_path_list_says_how_to_move_its_state(
        tmp_path):
    """Adding a tier to an existing store (store=[nvme] then [nvme, pfs])
    is refused naming the recorded paths and the way over: the state,
    exported, loads into an optimizer on the new paths and trains on
    exactly as the old store does."""
    import copy
    a, b, c = (str(tmp_path / d) for d in ("a", "b", "c"))
    model, opt = trained([a])
    sd = opt.state_dict()
    opt.close()
    with pytest.raises(RuntimeError, match=rf"has 1 paths \({a}\); the "
                       r"options name 2.*export_state_dict"):
        mt.AdamW(model.parameters(), store=[a, b], resume=True)
    assert not os.path.exists(b) or os.listdir(b) == []  # nothing written
    moved = copy.deepcopy(model)
    new = mt.AdamW(moved.named_parameters(), lr=1e-2, store=[b, c])
    new.load_state_dict(mt.export_state_dict(sd))
    old = mt.AdamW(model.named_parameters(), lr=1e-2, store=[a],
                   resume=True)
    for m, o in ((model, old), (moved, new)):
        for s in range(3, 6):
            o.zero_grad()
            loss_of(m, s).backward()
            o.step()
    assert new.step_count == old.step_count == 6
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(),
                                                 moved.parameters()))
    old.close()
    new.close()


@pytest.mark.parametrize("key,value", [
    ("subgroup_numel", 0), ("subgroup_numel", -5), ("subgroup_numel", 2.5),
    ("subgroup_numel", True), ("subgroup_numel", 1 << 70),
    ("prefetch", 0), ("commits", 65), ("threads", -1),
    ("max_grad_norm", float("nan")), ("loss_scale", 0)])
def test_engine_sizes_are_checked_with_a_message(store_dir, key, value):
    """A negative or huge size got pybind11's signature dump, 2.5 was
    taken as 2: each is a ValueError naming the keyword and its range."""
    with pytest.raises(ValueError, match=key):
        mt.AdamW(make_model().parameters(), store=store_dir, **{key: value})
    assert not os.path.exists(os.path.join(store_dir, "mlpo"))


def test_a_config_that_is_not_utf8_is_named(tmp_path):
    toml = tmp_path / "store.toml"
    toml.write_bytes(b'[[path]]\nroot = "caf\xe9"\n')
    with pytest.raises(ValueError, match=r"store.toml: not UTF-8 text.*0xe9"):
        mt.AdamW(make_model().parameters(), store=str(toml))


def test_tags_are_listed_oldest_first(store_dir):
    # Oldest state first, whatever the names; tags of one state by name.
    model, opt = trained(store_dir)
    for s, name in enumerate(("zeta", "alpha", "mid")):
        opt.zero_grad()
        loss_of(model, s).backward()
        opt.step()
        opt.checkpoint(name)
    opt.checkpoint("beta")
    assert [t for t in opt.tags() if not t.startswith("step-")] == \
        ["zeta", "alpha", "beta", "mid"]
    opt.close()


def test_engine_errors_carry_their_reason_not_only_words(store_dir):
    """The adapter acts on the engine's reason for a failure
    (_mlpo.EngineError.reason), not on its message's words: a namespace
    held by a live process, one of another state format, one whose
    objects have another size; each opening decision checked here."""
    import sys
    import textwrap
    from mlpo import _mlpo
    model, opt = trained(store_dir, steps=2)
    # Held by this process: a second optimizer on the namespace takes
    # another one, as before.
    m2 = make_model(seed=1)
    o2 = mt.AdamW(m2.named_parameters(), lr=1e-2, store=store_dir)
    assert o2.store_name != opt.store_name
    o2.close()
    opt.close()
    # Another state format asked of the namespace by name: a ValueError
    # naming the one it holds.
    with pytest.raises(ValueError, match="state_format='fp32'"):
        mt.AdamW(make_model().named_parameters(), lr=1e-2, store=store_dir,
                 name="mlpo", state_format="bf16-moments")
    # Held by another live process while resuming: refused, naming its pid.
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            sys.path.insert(0, {os.path.dirname(__file__)!r})
            import mlpo.torch as mt
            from helpers import make_model
            m = make_model()
            o = mt.AdamW(m.named_parameters(), lr=1e-2, store={store_dir!r},
                         resume=True)
            print("OPEN", flush=True)
            time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=os.path.dirname(
            os.path.dirname(mt.__file__))))
    try:
        assert holder.stdout.readline().strip() == "OPEN"
        with pytest.raises(RuntimeError, match=f"pid {holder.pid}"):
            mt.AdamW(make_model().named_parameters(), lr=1e-2,
                     store=store_dir, resume=True)
    finally:
        holder.kill()
        holder.wait()
    # The binding's own error type and attributes.
    o3 = mt.AdamW(make_model().named_parameters(), lr=1e-2, store=store_dir,
                  resume=True)
    try:
        o3.checkpoint("kept")
        with pytest.raises(_mlpo.EngineError) as e:
            o3._engine.tag("kept")
        assert isinstance(e.value, RuntimeError)
        assert e.value.code == "ALREADY_EXISTS" and e.value.reason is None
        assert str(e.value).startswith("ALREADY_EXISTS: ")
    finally:
        o3.close()


def test_a_configs_rank_other_than_the_processs_and_absurd_sizes_are_refused(
        tmp_path):
    """Issue 49 item 1: a TOML with rank = 3 made rank 0's store without a
    word (and `mlpo inspect` of the TOML then called the healthy store's
    directory lost). Issue 51 item 5: a cap of "1" (bytes/s: close()
    waited for hours) and a segment larger than the disk's free space
    were taken. Each is refused naming the key, and nothing is made."""
    (tmp_path / "nv").mkdir()
    model = make_model()
    nv = '[[path]]\nroot = "nv"\n'
    for text, says in (("rank = 3\n" + nv, "rank 3 is not this process's"),
                       (nv + "write_cap = 1\n", "write_cap 1 bytes/s"),
                       (nv + 'read_cap = "100K"\n', "below 1 MiB/s"),
                       (nv + 'segment_bytes = "1T"\n',
                        "free on its disk"),
                       (nv + 'capacity = "1G"\nsegment_bytes = "2G"\n',
                        "more than its capacity")):
        cfg = tmp_path / "run.toml"
        cfg.write_text(text)
        with pytest.raises(ValueError, match=says):
            mt.AdamW(model.parameters(), store=str(cfg))
        assert os.listdir(tmp_path / "nv") == [], text
    # The rank it runs as is accepted (one process: 0).
    cfg.write_text("rank = 0\n" + nv)
    opt = mt.AdamW(model.parameters(), store=str(cfg))
    opt.zero_grad()
    loss_of(model, 0).backward()
    opt.step()
    assert os.path.isdir(tmp_path / "nv" / "mlpo" / "rank-0")
    opt.close()
