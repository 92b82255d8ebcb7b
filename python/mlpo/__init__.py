"""mlpo: optimizer state (fp32 master weights and Adam moments) in a tiered,
versioned object store striped over every storage path at once.

    import mlpo.torch
    opt = mlpo.torch.AdamW(model.named_parameters(), lr=1e-3, store="ckpt")

See docs/user-guide.md for everything else.
"""
from . import _mlpo  # noqa: F401  (the C++ engine)

__all__ = ["_mlpo"]
__version__ = "0.1.0"
