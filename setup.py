"""Builds the native engine core (`constrain.engine.native`, C++17 with pybind11); everything
else about the package is in pyproject.toml."""

import os

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

SOURCES = ["native/counted.cpp", "native/escapes.cpp", "native/lexer.cpp", "native/trie.cpp", "native/module.cpp"]
# CONSTRAIN_SANITIZE=1 builds with AddressSanitizer and UndefinedBehaviorSanitizer (make
# test-sanitize)
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"]
sanitize = os.environ.get("CONSTRAIN_SANITIZE") == "1"


class AtomicBuildExt(build_ext):
    """`build_ext` whose in-place copy replaces the module file atomically: an interpreter
    already running keeps the old file mapped, instead of seeing it rewritten under it."""

    def copy_file(self, infile, outfile, *args, **kwargs):
        temporary = f"{outfile}.{os.getpid()}.tmp"
        _, copied = super().copy_file(infile, temporary, *args, **kwargs)
        os.replace(temporary, outfile)
        return outfile, copied


native = Pybind11Extension(
    "constrain.engine.native",
    SOURCES,
    cxx_std=17,
    extra_compile_args=["-O2", *(SANITIZE if sanitize else [])],
    extra_link_args=SANITIZE if sanitize else [],
    depends=[
        "native/admits.hpp",
        "native/escapes.hpp",
        "native/lexer.hpp",
        "native/trie.hpp",
        "native/json_keys.hpp",
        "native/json_keys_impl.hpp",
    ],
)

setup(ext_modules=[native], cmdclass={"build_ext": AtomicBuildExt})
