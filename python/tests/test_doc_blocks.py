"""The docs' code blocks, run as written (issue 49: a doc-test).

Every ```python and ```sh block of README.md and docs/*.md is listed in
BLOCKS below, keyed by its file and its first line, with how it is run:

  run       run on the CPU as written, in a fresh directory, after a
            prelude that gives the names the block takes as given
            (`model`, `data`, ...). The only edits are SUBSTITUTIONS:
            absolute store paths moved into the test's directory, `...`
            placeholders given values, step counts made small. An
            epilogue then checks what the block promises (the optimizer
            stepped, the checkpoint restores, ...).
  covered   needs what a unit test cannot give in seconds (two ranks, a
            Trainer with a dataset, a DeepSpeed checkpoint, a build); the
            test named runs the same calls, and that file must contain
            the block's key call.
  not code  a shell line for a person (the install commands the CI runs
            itself).

A block added to the docs and missing here fails the test, as does a
listed block that is no longer in the docs: the list is the docs'.
"""
import glob
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLI = os.path.join(ROOT, "build", "tools", "mlpo")

# Names the blocks take as given: a small model and data for it.
PRELUDE = textwrap.dedent("""
    import os, torch, torch.nn.functional as F
    for d in ("nvme", "lustre", "local_nvme"):  # the blocks' disks
        os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    class MyModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(16, 32)
            self.b = torch.nn.Linear(32, 4)
        def forward(self, x):
            return self.b(torch.relu(self.a(x)))
    model = MyModel()
    net = model
    data = [(torch.randn(8, 16), torch.randint(0, 4, (8,)))
            for _ in range(40)]
    """)
DDP_PRELUDE = PRELUDE + textwrap.dedent("""
    import socket, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=0, world_size=1)
    """)
# After a block: one more step must run and move the parameters.
# (The block's own `model`, which may be a new one; under DDP the wrapped
# `net` holds the parameters.)
STEPS_ON = textwrap.dedent("""
    inner = getattr(model, "module", model)
    before = [p.detach().clone() for p in inner.parameters()]
    x, y = data[0]
    F.cross_entropy(model(x), y).backward()
    opt.step()
    assert any(not torch.equal(a, p)
               for a, p in zip(before, inner.parameters()))
    opt.close()
    print("DOC-BLOCK-OK")
    """)

# The docs' two store paths, moved into the block's directory.
TWO_PATHS = ('store=["/nvme/ckpt", "/lustre/me/ckpt"]',
             'store=["nvme/ckpt", "lustre/ckpt"]')
# The DDP snippets (world size 1; the group ends with the block).
DDP_BLOCK = ("run", dict(
    prelude=DDP_PRELUDE + "import mlpo.torch\n",
    subs=[("store=...", 'store="nvme/run"')],
    epilogue=STEPS_ON + "dist.destroy_process_group()\n"))

# (file, first line of the block) -> (how, details)
BLOCKS = {
    ("README.md", "PYTHONPATH=build/python .venv/bin/python examples/finetune_hf.py"):
        ("covered", ("test_finetune_hf.py", "finetune_hf")),
    ("README.md", "scripts/run.sh     # 1. install missing packages, build Release, run the main job"):
        ("not code", "the two commands; .ci/run runs the second"),
    ("README.md", "pip install .                    # into any environment with torch >= 2.6"):
        ("not code", "an install into the user's environment"),
    ("README.md", "import torch, torch.nn.functional as F"): ("run", dict(
        prelude=PRELUDE,
        subs=[TWO_PATHS,
              ("step % 1000 == 0", "step % 10 == 0"),
              ("ckpt-3000.pt", "ckpt-30.pt")],
        epilogue=textwrap.dedent("""
            # opt.load_state_dict restored step 30's parameters and state
            # (the state stays in the store: the dict names its tag)
            assert opt.step_count == 30, opt.step_count
            want = ck["model"]
            got = model.state_dict()
            assert all(torch.equal(want[k], got[k]) for k in want), \\
                "the model is not step 30's"
            """) + STEPS_ON)),
    ("docs/coming-from.md", "opt = mlpo.torch.AdamW(model.named_parameters(), lr=..., store={"):
        ("run", dict(
            prelude=PRELUDE + "import mlpo.torch\n",
            subs=[('"/local_nvme/mlpo"', '"local_nvme/mlpo"'),
                  ('"/lustre/me/mlpo"', '"lustre/mlpo"'), ("lr=...", "lr=1e-3")],
            epilogue=STEPS_ON)),
    ("docs/coming-from.md", "import mlpo.deepspeed, mlpo.torch"):
        ("covered", ("test_deepspeed_import.py", "load_checkpoint(")),
    ("docs/coming-from.md", "opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)"):
        ("run", dict(
            prelude=PRELUDE + "import mlpo.torch\n",
            subs=[TWO_PATHS],
            epilogue=STEPS_ON)),
    ("docs/coming-from.md", "import mlpo.hf, mlpo.torch"):
        ("covered", ("test_hf_trainer.py", "TrainerCheckpoints()")),
    ("docs/coming-from.md", "import mlpo.lightning, mlpo.torch"):
        ("covered", ("lightning_helpers.py", "StoreCheckpoints(")),
    ("docs/coming-from.md", "opt = mlpo.torch.AdamW(model.named_parameters(), lr=3e-4, store=...)"):
        ("covered", ("test_hf_accelerate.py", "acc.prepare(")),
    ("docs/coming-from.md", "for block in model.blocks: fully_shard(block)"):
        ("covered", ("fsdp_worker.py", "fully_shard(")),
    ("docs/coming-from.md", "model = DistributedDataParallel(net)"):
        DDP_BLOCK,
    ("docs/operations.md", "mlpo inspect STORE            # objects, versions, bytes per path, tags"):
        ("sh", dict(subs=[("mlpo ", CLI + " "), ("STORE", "store/nvme/run")])),
    ("docs/user-guide.md", "import mlpo.torch                      # pip install . (or PYTHONPATH=build/python)"):
        ("run", dict(
            prelude=PRELUDE,
            subs=[TWO_PATHS],
            epilogue=textwrap.dedent("""
                ck = torch.load("ckpt.pt")
                assert ck["opt"]["mlpo"] and ck["model"]
                """) + STEPS_ON)),
    ("docs/user-guide.md", 'os.makedirs("nvme", exist_ok=True)  # mlpo makes store=, never its parents'):
        ("run", dict(
            prelude=PRELUDE + "import mlpo.torch\n"
            "data = [x for x, _ in data]\n",
            subs=[],
            epilogue=textwrap.dedent("""
                assert opt.step_count == 40, opt.step_count
                opt.close()
                print("DOC-BLOCK-OK")
                """))),
    ("docs/user-guide.md", "model = DistributedDataParallel(net)"):
        DDP_BLOCK,
    ("docs/user-guide.md", "ninja -C build mlpo-example-adamw"):
        ("covered", ("../../examples/CMakeLists.txt",
                     "add_test(NAME example_adamw")),
}

FENCE = re.compile(r"```(python|sh|bash|console)\n(.*?)```", re.S)


def doc_blocks():
    out = {}
    for f in ["README.md"] + sorted(
            os.path.relpath(p, ROOT)
            for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        with open(os.path.join(ROOT, f)) as fh:
            for m in FENCE.finditer(fh.read()):
                body = m.group(2)
                out[(f, body.splitlines()[0])] = body
    return out


def test_every_block_of_the_docs_is_listed():
    found = doc_blocks()
    missing = sorted(set(found) - set(BLOCKS))
    gone = sorted(set(BLOCKS) - set(found))
    assert not missing, "blocks of the docs no test runs (add them to " \
        f"BLOCKS): {missing}"
    assert not gone, f"listed blocks no longer in the docs: {gone}"


@pytest.mark.parametrize("key", sorted(k for k, v in BLOCKS.items()
                                       if v[0] == "covered"),
                         ids=lambda k: f"{k[0]}:{k[1][:30]}")
def test_a_covered_block_is_run_by_its_test(key):
    test_file, call = BLOCKS[key][1]
    path = os.path.normpath(os.path.join(os.path.dirname(__file__),
                                         test_file))
    with open(path) as f:
        assert call in f.read(), f"{test_file} does not run {call}"


def substituted(body, subs):
    for a, b in subs:
        assert a in body, f"substitution {a!r} no longer applies"
        body = body.replace(a, b)
    return body


RUNNER = textwrap.dedent("""
    # Each block in a directory and a namespace of its own, in one process
    # (one torch import for all); what each printed or raised, as JSON.
    import contextlib, io, json, os, sys, traceback
    out = {}
    for name, script in json.load(open(sys.argv[1])).items():
        os.makedirs(name)
        os.chdir(name)
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                exec(compile(script, name + "/block.py", "exec"),
                     {"__name__": "__main__"})
            out[name] = buf.getvalue()
        except BaseException:
            out[name] = buf.getvalue() + traceback.format_exc()
        os.chdir("..")
    json.dump(out, open(sys.argv[2], "w"))
    """)


def run_keys():
    return sorted(k for k, v in BLOCKS.items() if v[0] == "run")


@pytest.fixture(scope="module")
def block_outputs(tmp_path_factory):
    """What each "run" block printed (or its traceback), all run in one
    subprocess."""
    d = tmp_path_factory.mktemp("blocks")
    scripts = {}
    for n, key in enumerate(run_keys()):
        spec = BLOCKS[key][1]
        body = substituted(doc_blocks()[key], spec["subs"])
        scripts[f"b{n}"] = spec["prelude"] + "\n# --- the block\n" + body + \
            "\n# --- the check\n" + spec["epilogue"]
    (d / "blocks.json").write_text(json.dumps(scripts))
    (d / "runner.py").write_text(RUNNER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in sys.path if p)}
    r = subprocess.run([sys.executable, "runner.py", "blocks.json",
                        "out.json"], cwd=d, capture_output=True, text=True,
                       timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    got = json.loads((d / "out.json").read_text())
    return {key: got[f"b{n}"] for n, key in enumerate(run_keys())}


@pytest.mark.parametrize("key", run_keys(),
                         ids=lambda k: f"{k[0]}:{k[1][:30]}")
def test_a_python_block_runs_as_written(key, block_outputs):
    out = block_outputs[key]
    assert "DOC-BLOCK-OK" in out, f"{key[0]}: the block failed:\n{out[-4000:]}"


def test_the_operations_commands_run_as_written(tmp_path):
    """operations.md's first look at a store (inspect, tags, verify
    --deep) on a store a job left."""
    import torch
    import mlpo.torch as mt
    m = torch.nn.Linear(16, 16)
    os.makedirs(tmp_path / "store" / "nvme")
    with mt.AdamW(m.parameters(), store=str(tmp_path / "store" / "nvme" /
                                            "run")) as opt:
        m(torch.randn(2, 16)).sum().backward()
        opt.step()
        opt.checkpoint("first")
    key = [k for k, v in BLOCKS.items() if v[0] == "sh"][0]
    body = substituted(doc_blocks()[key], BLOCKS[key][1]["subs"])
    for line in body.splitlines():
        cmd = line.split("#")[0].strip()
        if not cmd:
            continue
        r = subprocess.run(cmd, shell=True, cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, f"{cmd}: {r.stdout}{r.stderr}"
        if " tags " in cmd:
            assert "first" in r.stdout, r.stdout
