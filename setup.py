"""Build the optional Cython kernels from csrc/.

Only the extension list lives here; metadata is in pyproject.toml.

Environment switches:
  FASTEVAL_NO_EXTENSIONS=1   skip the compiled kernels (fasteval falls back to Numba / NumPy)
  FASTEVAL_DEBUG_BUILD=1     compile with -O0 -g for debugging
"""
import os

from setuptools import setup

ext_modules = []
if os.environ.get("FASTEVAL_NO_EXTENSIONS", "0") != "1":
    import numpy as np
    from Cython.Build import cythonize
    from setuptools import Extension

    debug = os.environ.get("FASTEVAL_DEBUG_BUILD", "0") == "1"
    extra_compile_args = ["-O0", "-g"] if debug else ["-O3"]
    ext_modules = cythonize(
        [
            Extension(
                "fasteval.kernels._cython_ops",
                ["csrc/_cython_ops.pyx"],
                include_dirs=[np.get_include()],
                extra_compile_args=extra_compile_args,
                define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            )
        ],
        compiler_directives={
            "language_level": 3,
            "boundscheck": debug,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": debug,
        },
    )

setup(ext_modules=ext_modules)
