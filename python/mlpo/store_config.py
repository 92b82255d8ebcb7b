"""Turns the `store=` argument of the adapter into the TOML text the C++
engine parses (store/store_options.h), so there is one parser and one set of
error messages for every way a store is named. A config is a dict of the
TOML's top-level keys plus "path": a list of per-path dicts."""
import glob
import json
import os
import tomllib

DEFAULT_DIR = "mlpo-store"


def _toml_value(key, v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (str, os.PathLike)):
        return json.dumps(os.fspath(v))
    raise ValueError(f"mlpo store option {key!r}: unsupported value {v!r}")


def _normalise_paths(paths):
    out = []
    for i, p in enumerate(paths):
        if isinstance(p, (str, os.PathLike)):
            p = {"root": os.fspath(p), "kind": "nvme" if i == 0 else "pfs"}
        if not isinstance(p, dict) or "root" not in p:
            raise ValueError(f"mlpo store path {i}: expected a directory or a "
                             f"dict with 'root', got {p!r}")
        out.append(dict(p))
    return out


def to_toml(config):
    """The TOML text of a config dict."""
    top = [f"{k} = {_toml_value(k, v)}" for k, v in config.items()
           if k != "path"]
    out = []
    for p in config["path"]:
        out.append("[[path]]")
        out.extend(f"{k} = {_toml_value(k, v)}" for k, v in p.items())
    return "\n".join(top) + "\n" + "\n".join(out) + "\n"


def load(store, create=True):
    """Returns (config dict, base_dir) for `store`:

    None             -> ./mlpo-store (created), one nvme path
    "x.toml"         -> that config file (must exist; relative roots are
                        relative to it)
    "dir"            -> one path at dir (created when its parent exists;
                        a missing parent is FileNotFoundError)
    ["d1", "d2"]     -> one path each: the first nvme, the others pfs
    {"path": [...], "durability": "tag", ...}  -> TOML keys as a dict
    """
    cwd = os.getcwd()
    base = cwd
    if store is None:
        store = os.path.join(cwd, DEFAULT_DIR)
    if isinstance(store, (str, os.PathLike)):
        s = os.path.abspath(os.fspath(store))
        if s.endswith(".toml"):
            if not os.path.isfile(s):
                raise FileNotFoundError(f"mlpo store config {s} does not exist")
            with open(s, "rb") as f:
                try:
                    store = tomllib.load(f)
                except tomllib.TOMLDecodeError as e:
                    raise ValueError(f"mlpo store config {s}: {e}") from None
                except UnicodeDecodeError as e:
                    raise ValueError(
                        f"mlpo store config {s}: not UTF-8 text (TOML files "
                        f"are UTF-8): byte {e.object[e.start]:#04x} at "
                        f"offset {e.start}") from None
            base = os.path.dirname(s)
            if not isinstance(store.get("path"), list):
                raise ValueError(f"mlpo store config {s}: no [[path]] tables")
        else:
            store = [s]
    if isinstance(store, (list, tuple)):
        store = {"path": list(store)}
    if not isinstance(store, dict):
        raise TypeError(f"mlpo: store= takes None, a directory, a list of "
                        f"directories, a .toml path or a dict, not {store!r}")
    paths = store.get("path")
    if isinstance(paths, (str, bytes, os.PathLike, dict)):
        paths = [paths]  # one path: not a list of its characters
    if not paths:
        raise ValueError("mlpo store: no paths (give 'path': [dir, ...])")
    config = {k: v for k, v in store.items() if k != "path"}
    config["path"] = _normalise_paths(paths)
    if create:
        make_roots(config, base)
    return config, base


def _recorded_roots(roots):
    """The path roots that the stores found on `roots` record (their STORE
    descriptors, <root>/<name>/rank-<r>/STORE): a recorded root that is
    missing is a directory gone (unmounted, moved), not one to make."""
    out = set()
    for r in roots:
        for desc in glob.glob(os.path.join(glob.escape(r), "*", "rank-*",
                                           "STORE")):
            try:
                with open(desc, encoding="utf-8") as f:
                    for p in json.load(f).get("paths", []):
                        out.add(os.path.normpath(p["root"]))
            except (OSError, ValueError, TypeError, KeyError, AttributeError):
                continue
    return out


def make_roots(config, base):
    """Creates each path's root (never its parents) of a config load()
    returned, once the config is known to be good: a config with a typo
    leaves no directory behind. A missing root that a store on the other
    paths records (a reopen) is never made: an empty directory in place of
    an unmounted or moved one would only hide it (the open then says the
    directory is gone); a new one (a tier added) is."""
    roots = [os.path.join(base, os.fspath(p["root"])) for p in config["path"]]
    recorded = _recorded_roots(roots)
    for root in roots:
        if os.path.exists(root) and not os.path.isdir(root):
            raise NotADirectoryError(
                f"mlpo store path {root} exists and is not a directory")
        if not os.path.isdir(root):
            # The path itself is made, never its parents: a typo in a
            # mount point (/lustr/...) must not fill another disk.
            parent = os.path.dirname(os.path.normpath(root))
            if os.path.exists(parent) and not os.path.isdir(parent):
                raise NotADirectoryError(
                    f"mlpo store path {root}: {parent} is a file, not a "
                    "directory")
            if not os.path.isdir(parent):
                raise FileNotFoundError(
                    f"mlpo store path {root}: its parent directory "
                    f"{parent} does not exist (a typo, or a file system "
                    "that is not mounted?); mlpo creates the path "
                    "itself but not its parents: create them first")
            if os.path.normpath(os.path.abspath(root)) not in recorded:
                os.makedirs(root, exist_ok=True)


def source(store):
    """Where a store= argument's config comes from, for messages: the TOML
    file's path, or what the argument is."""
    if isinstance(store, (str, os.PathLike)):
        s = os.path.abspath(os.fspath(store))
        return s if s.endswith(".toml") else f"(store= {s})"
    if isinstance(store, dict):
        return "(the store= dict)"
    return f"(store= {store!r})"


def resolve(store, create=True):
    """(toml_text, base_dir) for `store` (see load())."""
    config, base = load(store, create)
    return to_toml(config), base


def available_memory():
    """MemAvailable of /proc/meminfo in bytes (0 when unknown)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


MIB = 1 << 20
DEFAULT_SEGMENT = 256 * MIB
# Share of available memory the DRAM tier may take by default.
CACHE_SHARE = 0.5


def apply_defaults(config, state_bytes, local_ranks=1):
    """Defaults that fit the state (the keys the config leaves out):

    cache          the whole state when it fits in CACHE_SHARE of available
                   memory (shared by the ranks of this node), else that
                   budget: the rest spills to the paths
    segment_bytes  a quarter of the state, 1 MiB to 256 MiB, so that a
                   small model's store is small
    """
    out = dict(config)
    out["path"] = [dict(p) for p in config["path"]]
    if "cache" not in out:
        budget = int(available_memory() * CACHE_SHARE / max(1, local_ranks))
        want = state_bytes + MIB
        out["cache"] = max(0, min(want, budget))
    extent = _size(out.get("extent_bytes", MIB))
    seg = -(-max(state_bytes // 4, 1) // MIB) * MIB
    seg = max(extent, min(DEFAULT_SEGMENT, seg))
    for p in out["path"]:
        p.setdefault("segment_bytes", seg)
    return out


def _size(v):
    if isinstance(v, int):
        return v
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40,
             "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
    s = str(v).strip().upper().replace("IB", "")
    for u in sorted(units, key=len, reverse=True):
        if s.endswith(u) and s[:-len(u)].strip().isdigit():
            return int(s[:-len(u)]) * units[u]
    return int(s) if s.isdigit() else MIB
