"""`pip install .`: setuptools builds the C++ engine with CMake and packs the
`_mlpo` extension and the `mlpo` command into the `mlpo` package.

The CMake build goes to $MLPO_BUILD_DIR when set (scripts/test.sh points it
at the developer build, `build/`, so nothing is built twice), else to
`build-pip/` (Release, no tests, no benchmarks). Metadata is in
pyproject.toml.
"""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(ROOT, "build-pip"), exist_ok=True)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.abspath(
            os.environ.get("MLPO_BUILD_DIR") or os.path.join(ROOT, "build-pip"))
        os.makedirs(build_dir, exist_ok=True)
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            print(f"mlpo: configuring the C++ build in {build_dir}", flush=True)
            subprocess.check_call([
                "cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja",
                "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_TESTING=OFF",
                "-DMLPO_BUILD_BENCH=OFF", "-DMLPO_WITH_PYTHON=ON",
                f"-DPython_EXECUTABLE={sys.executable}"])
        print(f"mlpo: building _mlpo and mlpo in {build_dir} (minutes the "
              "first time)", flush=True)
        subprocess.check_call(
            ["cmake", "--build", build_dir, "--target", "_mlpo", "mlpo"])
        built = glob.glob(os.path.join(build_dir, "python", "mlpo", "_mlpo*.so"))
        if len(built) != 1:
            raise RuntimeError(
                f"mlpo: expected one _mlpo extension in {build_dir}/python/mlpo, "
                f"found {built or 'none'} (is pybind11-dev installed? "
                "scripts/deps.sh installs it)")
        dst = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(built[0], dst)
        # The command: beside the extension in the wheel, and for `pip
        # install -e .` (editable: the package is the source tree) in the
        # source tree too.
        bin_dirs = [os.path.join(os.path.dirname(dst), "bin")]
        if getattr(self, "editable_mode", False) or self.inplace:
            bin_dirs.append(os.path.join(ROOT, "python", "mlpo", "bin"))
        for bin_dir in bin_dirs:
            os.makedirs(bin_dir, exist_ok=True)
            shutil.copy2(os.path.join(build_dir, "tools", "mlpo"),
                         os.path.join(bin_dir, "mlpo"))

setup(
    ext_modules=[Extension("mlpo._mlpo", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": os.path.join("build-pip", "setuptools")},
             "egg_info": {"egg_base": "build-pip"}},
)
