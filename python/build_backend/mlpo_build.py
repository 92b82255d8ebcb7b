"""The PEP 517 backend of `pip install .`: Debian's setuptools, reached from
pip's isolated build environment.

There is no PyPI here, so the build requires nothing pip would download
(`requires = []` in pyproject.toml). Where setuptools is not importable
(pip's isolated environment hides the system's packages) this backend adds
Debian's own dist-packages, which python3-setuptools and python3-wheel
install, and hands every hook to setuptools' own backend. setup.py drives the
CMake build of the extension and the `mlpo` command.
"""
import os
import sys

try:
    import setuptools  # noqa: F401
    import wheel  # noqa: F401
except ImportError:
    _DEBIAN = "/usr/lib/python3/dist-packages"
    if not os.path.isdir(_DEBIAN):
        raise ImportError(
            "mlpo's build needs setuptools and wheel: install python3-setuptools "
            "and python3-wheel (Debian), or run `pip install --no-build-isolation .` "
            "in an environment that has them")
    sys.path.append(_DEBIAN)

from setuptools import build_meta as _backend  # noqa: E402

# setuptools asks for `wheel` from the index; it is already importable.
def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


prepare_metadata_for_build_wheel = _backend.prepare_metadata_for_build_wheel
build_wheel = _backend.build_wheel
build_sdist = _backend.build_sdist
if hasattr(_backend, "build_editable"):
    build_editable = _backend.build_editable
    prepare_metadata_for_build_editable = \
        _backend.prepare_metadata_for_build_editable
