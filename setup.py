"""Builds the native engine core (`constrain.engine.native`, C++17 with pybind11); everything
else about the package is in pyproject.toml."""

import os

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

SOURCES = ["native/lexer.cpp", "native/trie.cpp", "native/module.cpp"]
# CONSTRAIN_SANITIZE=1 builds with AddressSanitizer and UndefinedBehaviorSanitizer (make
# test-sanitize)
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g"]
sanitize = os.environ.get("CONSTRAIN_SANITIZE") == "1"

native = Pybind11Extension(
    "constrain.engine.native",
    SOURCES,
    cxx_std=17,
    extra_compile_args=["-O2", *(SANITIZE if sanitize else [])],
    extra_link_args=SANITIZE if sanitize else [],
    depends=["native/lexer.hpp", "native/trie.hpp"],
)

setup(ext_modules=[native], cmdclass={"build_ext": build_ext})
