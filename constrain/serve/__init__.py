"""`constrain serve`: an OpenAI-compatible HTTP server over the decoding loop.

    constrain serve [MODEL] --host 127.0.0.1 --port 8000

`build(model, ...)` makes the application (`constrain.serve.app`) around a `Scheduler` that
batches every request's sequences in one decoding loop, behind the checks of
`constrain.serve.access` (API key, Host, Origin, JSON bodies); `run(...)` serves it with
uvicorn. See docs/serving.md.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

from constrain.errors import ConfigError
from constrain.serve.errors import RequestError
from constrain.serve.limits import Limits

__all__ = ["Limits", "RequestError", "build", "run", "serving", "spawned"]




def build(
    model,
    *,
    name: str | None = None,
    max_running: int = 16,
    max_queue: int = 64,
    prefill_chunk: int = 128,
    max_tokens: int = 512,
    timeout: float = 120.0,
    tool_format: str | None = None,
    host: str = "127.0.0.1",
    api_key: str | None = None,
    allowed_hosts: str | list[str] | None = None,
    allowed_origins: str | list[str] | None = None,
    docs: bool = False,
    limits: Limits | None = None,
):
    """The FastAPI application serving a loaded `model` (a `TransformersLM`).

    Args:
        name: the model id clients send (default: the model's name).
        max_running: requests decoded together (1: one at a time, no batching).
        max_queue: requests waiting beyond those; more are answered 429 with Retry-After.
        prefill_chunk: prompt tokens fed between two decoding steps: a long prompt is fed in
            chunks, so the other requests' next tokens wait for one chunk, not the prompt.
        max_tokens: a request's default max_tokens.
        timeout: a request's default and longest decoding time, in seconds.
        tool_format: force a registry tool-call format ("hermes", "llama3", "mistral")
            instead of deriving it from the chat template.
        host: the address the server will bind (`run` and `serving` pass theirs): the Host
            check's default and the warning for a public address without a key go by it.
        api_key: the key every request but /health must send as ``Authorization: Bearer``
            (default: none).
        allowed_hosts: Host names served beside the loopback names (comma-separated text or
            a list; ``*``: any). Default: the loopback names on a loopback address; on
            another, any host with an `api_key`, else the loopback names and IP addresses.
        allowed_origins: web origins whose pages may call the server, with CORS headers
            (``*``: any). Default: none; a request from another origin is refused (403).
        docs: serve FastAPI's /docs, /redoc and /openapi.json (default: off).
        limits: what one request may ask (`constrain.serve.limits.Limits`; its defaults).
    """
    from constrain.constraints import warm_up
    from constrain.serve.access import Access
    from constrain.serve.app import create_app
    from constrain.serve.protocol import Served
    from constrain.serve.scheduler import Scheduler

    warm_up(model.vocab)  # the vocabulary's shared structures, before the first request
    served = Served(model, name or model.name, max_tokens=max_tokens, timeout=timeout,
                    tool_format_name=tool_format, limits=limits or Limits())  # fmt: skip
    if not isinstance(prefill_chunk, int) or prefill_chunk < 1:
        raise ConfigError(f"prefill_chunk must be a positive number of tokens, got "
                          f"{prefill_chunk!r}")  # fmt: skip
    scheduler = Scheduler(model, max_running=max_running, max_queue=max_queue,
                          prefill_chunk=prefill_chunk)  # fmt: skip
    access = Access.of(host, api_key=api_key, allowed_hosts=allowed_hosts,
                       allowed_origins=allowed_origins, docs=docs)  # fmt: skip
    return create_app(served, scheduler, access)


def run(model_name: str | None = None, *, host: str = "127.0.0.1", port: int = 8000,
        device: str = "auto", log_level: str = "info", **options) -> None:  # fmt: skip
    """Load `model_name` (default: the bundled model) and serve it until interrupted;
    `options` are `build`'s."""
    import uvicorn

    from constrain.models import load_model
    from constrain.serve.app import SHUTDOWN_GRACE, Server

    model = load_model(model_name, device=device)
    app = build(model, host=host, **options)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level,
                            timeout_graceful_shutdown=SHUTDOWN_GRACE)  # fmt: skip
    Server(config, app).run()


@contextlib.contextmanager
def serving(model, *, host: str = "127.0.0.1", port: int = 0, **options) -> Iterator[str]:
    """Serve `model` from a thread of this process while the block runs; yields the base URL
    (``http://127.0.0.1:<port>``; port 0: a free one). `options` are `build`'s. For tests,
    benchmarks and notebooks; `run` is the command line's."""
    import uvicorn

    app = build(model, host=host, **options)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="constrain-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not start on {host}:{port}")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)


@contextlib.contextmanager
def spawned(model_name: str | None = None, **options) -> Iterator[tuple[str, int]]:
    """Run ``constrain serve`` as a child process on a free loopback port while the block
    runs, as users run it; yields (base URL, its pid). `options` are the command's
    (``max_running=1`` is ``--max-running 1``, ``docs=True`` is ``--docs``, a list is
    comma-separated)."""
    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "constrain.cli",
        "serve",
        *([model_name] if model_name else []),
    ]
    command += ["--port", str(port), "--log-level", "warning"]
    for key, value in options.items():
        flag = f"--{key.replace('_', '-')}"
        if isinstance(value, bool) or value is None:
            command += [flag] if value else []
        else:
            text = ",".join(value) if isinstance(value, (list, tuple)) else str(value)
            command += [flag, text]
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 600
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                        break
                if child.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    tail = log.read().decode(errors="replace")[-2000:]
                    raise RuntimeError(f"constrain serve did not start: {tail}")
                time.sleep(0.2)
            yield url, child.pid
        finally:
            child.terminate()
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
