"""Warnings that point at the user's line: torch 2.x wraps step() (hooks,
profiling, no_grad) and state_dict() in frames of its own, so a fixed
stacklevel lands inside torch. The first frame outside mlpo, torch and
accelerate/transformers' wrappers is the caller a user wants named."""
import os
import sys
import warnings

_SKIP = os.path.dirname(os.path.abspath(__file__)) + os.sep  # mlpo's own


def _skipped(filename):
    if filename.startswith(_SKIP):
        return True
    norm = filename.replace(os.sep, "/")
    return any(part in norm for part in (
        "/torch/optim/", "/torch/utils/_contextlib.py", "/torch/_compile.py",
        "/torch/_dynamo/", "/accelerate/optimizer.py"))


def warn_user(message, category=UserWarning):
    """warnings.warn(message, category) attributed to the first frame that
    is the user's code."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and _skipped(frame.f_code.co_filename):
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level + 1)
