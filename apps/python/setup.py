"""Builds the `rewind` package: rewind.py becomes rewind/__init__.py and librewind_c.so, built by
CMake from this checkout, lies beside it (rewind.py loads the library found beside itself first).

The CMake step:
- REWIND_CMAKE_BUILD_DIR set: that existing build directory (absolute, or relative to the
  checkout; CI passes the one its C++ stage made), whose rewind_c target is brought up to date;
  nothing is configured again;
- otherwise a build directory of its own (REWIND_CMAKE_BUILD_DIR unset: <checkout>/build-python)
  configured for the library alone (Release, no CUDA, no tests or apps), only rewind_c built.
REWIND_CMAKE_ARGS adds options to that configure step (e.g. "-DREWIND_CUDA=AUTO"); CMAKE_BUILD_PARALLEL_LEVEL
sets the jobs (default: the CPUs). Nothing is downloaded: only CMake and the compiler run.
"""
import glob
import os
import re
import shlex
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def _version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(\s*rewind\s+VERSION\s+([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("setup.py: no project(rewind VERSION ...) in " + os.path.join(ROOT, "CMakeLists.txt"))
    return m.group(1)


def _run(cmd):
    print("setup.py: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.check_call(cmd)


def _build_library():
    """The path of a freshly built librewind_c.so (the real file, not a symlink)."""
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    build_dir = os.environ.get("REWIND_CMAKE_BUILD_DIR")
    if build_dir:
        # Relative to the checkout: pip runs this script from apps/python, not the user's directory.
        build_dir = os.path.normpath(os.path.join(ROOT, build_dir))
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            raise RuntimeError(f"setup.py: REWIND_CMAKE_BUILD_DIR={build_dir} is not a configured CMake build")
    else:
        build_dir = os.path.join(ROOT, "build-python")
        cmd = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DREWIND_CUDA=OFF",
               "-DREWIND_BUILD_TESTS=OFF", "-DREWIND_BUILD_APPS=OFF"]
        if shutil.which("ccache"):
            cmd += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        cmd += shlex.split(os.environ.get("REWIND_CMAKE_ARGS", ""))
        _run(cmd)
    _run(["cmake", "--build", build_dir, "--target", "rewind_c", "-j", jobs])
    found = sorted(glob.glob(os.path.join(build_dir, "lib", "librewind_c.so*")), key=len)
    if not found:
        raise RuntimeError(f"setup.py: the build in {build_dir} made no lib/librewind_c.so")
    return os.path.realpath(found[0])


class BuildPy(build_py):
    """The package's two files: the module as rewind/__init__.py and the library beside it."""

    def run(self):
        pkg = os.path.join(self.build_lib, "rewind")
        os.makedirs(pkg, exist_ok=True)
        self.copy_file(os.path.join(HERE, "rewind.py"), os.path.join(pkg, "__init__.py"))
        self.copy_file(_build_library(), os.path.join(pkg, "librewind_c.so"))


class BinaryDistribution(Distribution):
    """The wheel holds a compiled library: tag it for this platform, not as pure Python."""

    def has_ext_modules(self):
        return True

    def has_pure_modules(self):
        return True  # BuildPy writes the package (no source tree of it for setuptools to find)


setup(
    version=_version(),
    packages=[],  # BuildPy writes the package itself
    cmdclass={"build_py": BuildPy},
    distclass=BinaryDistribution,
    zip_safe=False,
)
