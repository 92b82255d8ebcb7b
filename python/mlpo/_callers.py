"""Which library is calling: for the few places where a library's generic
code must see an mlpo optimizer otherwise than a plain torch.optim one
(its state lives in the store, its state dict names a tag)."""
import sys


def called_from(module, function, depth=6):
    """Whether `function` of a module whose name ends with `module` is
    among the `depth` callers of the function that asks."""
    f = sys._getframe(2)
    for _ in range(depth):
        if f is None:
            return False
        if f.f_code.co_name == function and f.f_globals.get(
                "__name__", "").endswith(module):
            return True
        f = f.f_back
    return False
