"""docs/operations.md's procedures, followed as written (issue 37, item
10): each test does what the runbook's steps say and checks that it ends
the problem."""
import json
import os
import subprocess

import torch

import mlpo.torch as mt


def cli(mlpo_cli, *args):
    r = subprocess.run([mlpo_cli, *args], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode >= 0, r.stderr
    # --json: stdout alone (progress goes to stderr)
    return r.returncode, r.stdout if "--json" in args else \
        r.stdout + r.stderr


def make(d, **kw):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    return m, mt.AdamW(m.parameters(), lr=1e-2, subgroup_numel=2048,
                       store=[d + "/nvme", d + "/pfs"], **kw)


def train(m, opt, n):
    for _ in range(n):
        torch.manual_seed(opt.step_count)
        m(torch.randn(2, 64)).square().mean().backward()
        opt.step()
        opt.zero_grad()


def test_bad_extents_a_replica_holds_back_to_exit_0(tmp_path, mlpo_cli):
    """"Bad extents, a replica holds them": verify exits 3; the steps clear
    it without ever moving the good copy onto the suspect disk."""
    d = str(tmp_path)
    m, opt = make(d)
    train(m, opt, 3)
    opt.close()
    store = d + "/nvme/mlpo/rank-0"
    assert cli(mlpo_cli, "tag", store, "r", "--copy-to", "1")[0] == 0
    # The first copy's extent on path 0 goes bad (a flipped byte).
    rc, text = cli(mlpo_cli, "show", store, "g0.s000000", "--json")
    assert rc == 0, text
    shown = json.loads(text)
    ext = next(e for e in shown["extents"] if e["path"].endswith("/nvme"))
    with open(ext["file"], "r+b") as f:
        f.seek(ext["offset"] + 100)
        b = f.read(1)
        f.seek(ext["offset"] + 100)
        f.write(bytes([b[0] ^ 0xFF]))
    rc, text = cli(mlpo_cli, "verify", "--deep", store)
    assert rc == 3, text
    # A new tag of the same versions changes nothing (the trap the runbook
    # warns of).
    rc, text = cli(mlpo_cli, "tag", store, "again", "--copy-to", "1")
    assert cli(mlpo_cli, "verify", "--deep", store)[0] == 3
    assert cli(mlpo_cli, "drop-tag", store, "again")[0] == 0
    # 1. Train on (fresh versions), then a checkpoint with a second copy.
    m, opt = make(d, resume=True)
    train(m, opt, 1)
    opt.close()
    assert cli(mlpo_cli, "verify", store)[0] == 0  # the heads are clean
    assert cli(mlpo_cli, "tag", store, "r2", "--copy-to", "1")[0] == 0
    # 2. What still holds the bad copy, and the tags that hold it.
    rc, text = cli(mlpo_cli, "verify", "--deep", "--json", store)
    assert rc == 3
    covered = json.loads(text)["covered_by_replica"]
    assert {c["object"] for c in covered} == {"g0.s000000"}
    assert cli(mlpo_cli, "drop-tag", store, "r")[0] == 0
    assert cli(mlpo_cli, "gc", store)[0] == 0
    # 3. Exit 0, and the state trains on from the new checkpoint.
    rc, text = cli(mlpo_cli, "verify", "--deep", store)
    assert rc == 0, text
    m, opt = make(d, resume=True)
    assert opt.step_count == 4
    opt.close()



def train_on_then_reopen_refused(d, m, opt):
    """Path 1 went away under a running job: steps go on in degraded mode
    (the other path takes the new versions, a warning names the failed
    one) or fail; the next open refuses. The refusal's text."""
    import pytest
    try:
        train(m, opt, 2)
    except (RuntimeError, OSError):
        pass
    try:
        opt.close()
    except RuntimeError:
        pass
    with pytest.raises((RuntimeError, OSError)) as e:
        make(d, resume=True)
    return str(e.value)


def train_on_then_reopen_names_lost_path(d, m, opt):
    """The store's directory on path 1 gone: the refusal names path 1 and
    --lost-path."""
    assert "--lost-path 1" in train_on_then_reopen_refused(d, m, opt)


def test_a_path_that_vanishes_mid_run_is_named_with_the_way_out(tmp_path,
                                                                 mlpo_cli):
    """"A path's directory vanished": the step fails; the next call names
    the path and --lost-path; an empty directory in its place is named as
    a disk not mounted (no lossy command); `mlpo recover --lost-path` then
    lets training go on."""
    import shutil
    import pytest
    d = str(tmp_path)
    m, opt = make(d, durability="step")
    train(m, opt, 2)
    opt.checkpoint("a")
    train(m, opt, 1)
    shutil.rmtree(d + "/pfs/mlpo")  # its disk unmounted, or removed
    train_on_then_reopen_names_lost_path(d, m, opt)
    shutil.rmtree(d + "/pfs")  # an empty directory in the disk's place
    os.makedirs(d + "/pfs")
    # (on its parent's file system: nothing is mounted there, so the disk
    # is most likely not mounted, and no lossy command is named; an empty
    # disk really mounted there is path_identity_test's)
    with pytest.raises((RuntimeError, OSError)) as e:
        make(d, resume=True)
    assert "not mounted" in str(e.value) and \
        "--lost-path" not in str(e.value), str(e.value)
    # The user knows the disk is lost for good: the lossy command works.
    rc, text = cli(mlpo_cli, "recover", d + "/nvme", "--lost-path", "1")
    assert rc in (0, 1), text
    assert "LOST" in text or "lost" in text, text
    m, opt = make(d, resume=True)  # says where it goes on from
    train(m, opt, 1)
    opt.close()


def test_an_unmounted_or_moved_path_is_told_apart_and_never_made_empty(
        tmp_path, mlpo_cli):
    """A path's directory renamed away (a disk not mounted, a directory
    moved): the reopen does not make it again empty, and says it is gone,
    to mount or point at; an empty directory in its place (an empty mount
    point) is named as one. Mounted back, the store resumes where it was
    and verifies --deep."""
    import pytest
    d = str(tmp_path)
    m, opt = make(d, durability="step")
    train(m, opt, 2)
    opt.close()
    os.rename(d + "/pfs", d + "/pfs-unmounted")
    with pytest.raises((RuntimeError, OSError)) as e:
        make(d, resume=True)
    assert "gone" in str(e.value) and "not mounted" in str(e.value)
    assert "Mount it back" in str(e.value)
    assert not os.path.exists(d + "/pfs")  # not made empty
    os.makedirs(d + "/pfs")  # an empty mount point
    with pytest.raises((RuntimeError, OSError)) as e:
        make(d, resume=True)
    assert "empty" in str(e.value) and "not mounted" in str(e.value)
    os.rmdir(d + "/pfs")
    os.rename(d + "/pfs-unmounted", d + "/pfs")  # mounted back
    m2, opt = make(d, resume=True)
    assert opt.step_count == 2
    train(m2, opt, 1)
    opt.close()
    rc, text = cli(mlpo_cli, "verify", "--deep", d + "/nvme")
    assert rc == 0, text


def test_another_user_is_told_permission_denied(tmp_path, mlpo_cli):
    """A store's 0700 directories read by another user: "permission
    denied", naming the directory and its owner (it said "not a store
    directory")."""
    import pytest
    import shutil
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run a command as another user")
    d = str(tmp_path)
    os.chmod(d, 0o755)
    m, opt = make(d)
    train(m, opt, 1)
    opt.close()
    os.chmod(d + "/nvme", 0o755)
    for target in (d + "/nvme", d + "/nvme/mlpo/rank-0"):
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534",
                            "--clear-groups", mlpo_cli, "verify", target],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1
        assert "permission denied" in r.stderr, r.stderr
        assert "owner uid 0" in r.stderr, r.stderr


def test_a_refused_write_on_a_hard_linked_copy_changes_nothing(tmp_path,
                                                               mlpo_cli):
    """`cp -al` shares MLPO-LOCK; a write refused on the copy said "Nothing
    was changed" but wrote its pid into the shared lock file."""
    d = str(tmp_path / "a")
    os.makedirs(d)
    m, opt = make(d)
    train(m, opt, 1)
    opt.close()
    lock = d + "/nvme/mlpo/rank-0/meta/MLPO-LOCK"
    before = open(lock, "rb").read()
    subprocess.run(["cp", "-al", d, str(tmp_path / "b")], check=True)
    # Either store, written while they share files: refused (every write
    # would change the other too), and the shared lock file left as it was.
    for store in (d + "/nvme/mlpo/rank-0",
                  str(tmp_path / "b" / "nvme" / "mlpo" / "rank-0")):
        rc, text = cli(mlpo_cli, "tag", store, "x")
        assert rc != 0, text
        assert "hard link" in text or "copy" in text, text
    assert open(lock, "rb").read() == before


def test_relocating_a_copy_never_takes_the_originals_lock(tmp_path,
                                                          mlpo_cli):
    """A copy of a store's first path (its index inside) relocated with
    --root: the index moves with that path. It took the original's index
    and lock (refused while the original's job ran); now the copy is
    relocated while the original stays open."""
    import shutil
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    os.makedirs(a)
    os.makedirs(b)
    m, opt = make(a)
    train(m, opt, 2)
    opt.checkpoint("t")
    shutil.copytree(a + "/nvme", b + "/nvme", symlinks=True)
    copy = b + "/nvme/mlpo/rank-0"
    # The original's job holds its store while the copy is relocated.
    rc, text = cli(mlpo_cli, "relocate", copy, "--root", "0=" + b + "/nvme")
    assert rc != 0 and "already open" not in text, text  # path 1 missing
    shutil.copytree(a + "/pfs", b + "/pfs", symlinks=True)
    rc, text = cli(mlpo_cli, "relocate", copy, "--root", "0=" + b + "/nvme",
                   "--root", "1=" + b + "/pfs")
    assert rc == 0, text
    train(m, opt, 1)  # the original goes on
    opt.close()
    m2, o2 = make(b, resume=True)
    assert o2.step_count == 2
    o2.close()


def test_a_bind_mount_taken_away_mid_run(tmp_path, mlpo_cli):
    """Path 1 is a bind mount that goes away mid-run (umount -l, as an
    unmounted disk): the job goes on or fails the step; the next open
    says the disk is not mounted and names no lossy command, and mounting
    it back resumes."""
    import pytest
    if os.getuid() != 0:
        pytest.skip("needs root to bind-mount")
    d = str(tmp_path)
    disk, root = d + "/disk1", d + "/pfs"
    os.makedirs(disk)
    os.makedirs(root)
    r = subprocess.run(["mount", "--bind", disk, root], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {r.stderr.strip()}")
    try:
        m, opt = make(d, durability="step")
        train(m, opt, 2)
        opt.checkpoint("a")
        subprocess.run(["umount", "-l", root], check=True)
        # The root is an empty directory on its parent's file system now:
        # the disk is not mounted; no lossy command is named.
        why = train_on_then_reopen_refused(d, m, opt)
        assert "not mounted" in why and "--lost-path" not in why, why
        subprocess.run(["mount", "--bind", disk, root], check=True)
        m, opt = make(d, resume=True)
        assert opt.step_count >= 2
        opt.close()
        assert cli(mlpo_cli, "verify", "--deep", d + "/nvme")[0] == 0
    finally:
        subprocess.run(["umount", "-l", root], capture_output=True)


def test_a_salvage_that_kept_no_tag_resumes_afresh_as_the_message_says(
        tmp_path, mlpo_cli):
    """Bad extents in one state object of a store without tags: `recover
    --salvage` drops that head and keeps the rest (the parameters' step
    counts among them); resume=True then refuses ("no state to resume")
    and says to start afresh with resume=False, which the runbook says
    reuses the store. It once also advised `mlpo recover --discard`,
    which found the index consistent and changed nothing."""
    d = str(tmp_path)
    m, opt = make(d, durability="step")
    train(m, opt, 4)
    opt.close()
    code, out = cli(mlpo_cli, "show", d + "/nvme", "g0.s000000", "--json")
    assert code == 0, out
    for e in json.loads(out)["extents"]:  # 4 bytes flipped in each
        with open(e["file"], "r+b") as f:
            f.seek(e["offset"] + 64)
            b = f.read(4)
            f.seek(e["offset"] + 64)
            f.write(bytes(x ^ 0x5A for x in b))
    code, out = cli(mlpo_cli, "recover", d + "/nvme", "--salvage")
    assert code == 0 and "DROPPED head" in out, out
    assert "nothing lost" not in out, out  # (the salvage lost heads)
    try:
        make(d, resume=True)[1].close()
        raise AssertionError("resume=True took a store without its state")
    except RuntimeError as e:
        msg = str(e)
    assert "no state to resume" in msg and "resume=False" in msg, msg
    assert "--discard" not in msg, msg
    m, opt = make(d, resume=False)  # as the message says
    assert opt.step_count == 0
    train(m, opt, 2)
    after = [p.detach().clone() for p in m.parameters()]
    opt.close()
    m, opt = make(d, resume=True)  # and the store is the new run's
    assert opt.step_count == 2
    assert all(torch.equal(a, p) for a, p in zip(after, m.parameters()))
    opt.close()
    code, out = cli(mlpo_cli, "verify", "--deep", d + "/nvme")
    assert code == 0, out
