"""Shared fixtures: the build tree's mlpo package and the mlpo CLI."""
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("MLPO_BUILD_DIR", os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(BUILD, "python"))


@pytest.fixture
def store_dir(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture
def mlpo_cli():
    path = os.path.join(BUILD, "tools", "mlpo")
    if not os.path.exists(path):
        pytest.skip(f"{path} not built")
    return path


@pytest.fixture
def build_python_path():
    return os.path.join(BUILD, "python")
