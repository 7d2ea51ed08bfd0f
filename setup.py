"""Builds the native engine core (`constrain.engine.native`, C++17 with pybind11); everything
else about the package is in pyproject.toml."""

import os

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

SOURCES = [
    "native/cfg.cpp",
    "native/counted.cpp",
    "native/earley.cpp",
    "native/escapes.cpp",
    "native/key_check.cpp",
    "native/lexer.cpp",
    "native/masks.cpp",
    "native/token_steps.cpp",
    "native/trie.cpp",
    "native/module.cpp",
]
# CONSTRAIN_SANITIZE=1 builds with AddressSanitizer and UndefinedBehaviorSanitizer, =thread with
# ThreadSanitizer (make test-sanitize)
SANITIZERS = {
    "1": ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"],
    "thread": ["-fsanitize=thread", "-fno-omit-frame-pointer", "-g"],
}
SANITIZE = SANITIZERS.get(os.environ.get("CONSTRAIN_SANITIZE", ""), [])


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
    extra_compile_args=["-O2", *SANITIZE],
    extra_link_args=SANITIZE,
    depends=[
        "native/admits.hpp",
        "native/cfg.hpp",
        "native/counted.hpp",
        "native/earley.hpp",
        "native/escapes.hpp",
        "native/lexer.hpp",
        "native/masks.hpp",
        "native/nbytes.hpp",
        "native/texts.hpp",
        "native/token_steps.hpp",
        "native/trie.hpp",
        "native/json_keys.hpp",
        "native/key_check.hpp",
        "native/json_keys_impl.hpp",
    ],
)

setup(ext_modules=[native], cmdclass={"build_ext": AtomicBuildExt})
