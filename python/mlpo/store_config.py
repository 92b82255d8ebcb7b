"""Turns the `store=` argument of the adapter into the TOML text the C++
engine parses (store/store_options.h), so there is one parser and one set of
error messages for every way a store is named."""
import json
import os

DEFAULT_DIR = "mlpo-store"


def _toml_value(key, v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (str, os.PathLike)):
        return json.dumps(os.fspath(v))
    raise ValueError(f"mlpo store option {key!r}: unsupported value {v!r}")


def _paths_toml(paths):
    out = []
    for i, p in enumerate(paths):
        if isinstance(p, (str, os.PathLike)):
            p = {"root": os.fspath(p), "kind": "nvme" if i == 0 else "pfs"}
        if not isinstance(p, dict) or "root" not in p:
            raise ValueError(f"mlpo store path {i}: expected a directory or a "
                             f"dict with 'root', got {p!r}")
        out.append("[[path]]")
        out.extend(f"{k} = {_toml_value(k, v)}" for k, v in p.items())
    return "\n".join(out) + "\n"


def resolve(store, create=True):
    """Returns (toml_text, base_dir) for `store`:

    None             -> ./mlpo-store (created), one nvme path
    "x.toml"         -> that config file (must exist)
    "dir"            -> one path at dir (created)
    ["d1", "d2"]     -> one path each: the first nvme, the others pfs
    {"path": [...], "durability": "tag", ...}  -> TOML keys as a dict
    """
    cwd = os.getcwd()
    if store is None:
        store = os.path.join(cwd, DEFAULT_DIR)
    if isinstance(store, (str, os.PathLike)):
        s = os.path.abspath(os.fspath(store))
        if s.endswith(".toml"):
            if not os.path.isfile(s):
                raise FileNotFoundError(f"mlpo store config {s} does not exist")
            with open(s, encoding="utf-8") as f:
                return f.read(), os.path.dirname(s)
        store = [s]
    if isinstance(store, (list, tuple)):
        store = {"path": list(store)}
    if not isinstance(store, dict):
        raise TypeError(f"mlpo: store= takes None, a directory, a list of "
                        f"directories, a .toml path or a dict, not {store!r}")
    paths = store.get("path")
    if not paths:
        raise ValueError("mlpo store: no paths (give 'path': [dir, ...])")
    if create:
        for p in paths:
            root = os.path.join(cwd, os.fspath(p["root"] if isinstance(p, dict)
                                              else p))
            if os.path.exists(root) and not os.path.isdir(root):
                raise NotADirectoryError(
                    f"mlpo store path {root} exists and is not a directory")
            os.makedirs(root, exist_ok=True)
    top = [f"{k} = {_toml_value(k, v)}" for k, v in store.items() if k != "path"]
    return "\n".join(top) + "\n" + _paths_toml(paths), cwd
