"""Who may use the server: the checks that keep a web page from driving a local
`constrain serve`, and the API key (docs/serving.md, "Security").

A browser runs any page's requests to any address, loopback included: a page can POST a
``text/plain`` body cross-origin without asking first, and a page whose domain the attacker
rebinds to 127.0.0.1 (DNS rebinding) is even same-origin with the server. So every HTTP
request passes these checks, in this order, before any work is done for it:

1. Host (400): the Host header names an allowed host. A rebound page's requests carry the
   attacker's domain, never one of ours.
2. Origin (403): a request from a page of another origin than the server's own is refused,
   unless `allowed_origins` lists it (then it is answered with CORS headers).
3. API key (401): with `api_key`, every path but ``/health`` needs
   ``Authorization: Bearer KEY`` (compared in constant time).
4. Content type (415): a POST body is ``application/json``; a browser sends no other type
   cross-origin without a preflight.

Refusals are OpenAI's error object, as every other error of the server.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse

from constrain.serve.errors import RequestError

__all__ = ["Access", "is_loopback"]

log = logging.getLogger("constrain.serve")

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
OPEN_PATHS = frozenset({"/health"})  # answered without the API key (a readiness probe)
DOCS_PATHS = {"docs_url": "/docs", "redoc_url": "/redoc", "openapi_url": "/openapi.json"}


@dataclass(frozen=True)
class Access:
    """Who may reach the server and how (see the module docstring for the checks).

    Attributes:
        host: the address the server binds; the Host check's default and the exposure
            warning go by it.
        api_key: the key every request but ``/health`` sends as ``Authorization: Bearer``
            (None: no key).
        allowed_hosts: Host names allowed beside the loopback names (``*``: any; a
            ``*.example.com`` entry allows its subdomains). Without it, a server bound to
            loopback allows only the loopback names; one bound elsewhere allows any host
            with an `api_key`, else the loopback names and any IP address.
        allowed_origins: web origins (``https://app.example.com``; ``*``: any) whose pages
            may call the server, answered with CORS headers. Without it, a request that
            carries another Origin than the server's own is refused.
        docs: serve ``/docs``, ``/redoc`` and ``/openapi.json`` (without the key).
    """

    host: str = "127.0.0.1"
    api_key: str | None = None
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    docs: bool = False

    @classmethod
    def of(
        cls,
        host: str = "127.0.0.1",
        *,
        api_key: str | None = None,
        allowed_hosts: str | Iterable[str] | None = None,
        allowed_origins: str | Iterable[str] | None = None,
        docs: bool = False,
    ) -> Access:
        """The settings from `build`'s options: lists as comma-separated text or iterables,
        an empty key as none."""
        hosts = tuple(_host_name(h) or h for h in _listed(allowed_hosts) if h != "*")
        hosts += ("*",) if "*" in _listed(allowed_hosts) else ()
        origins = tuple(o.lower().rstrip("/") for o in _listed(allowed_origins))
        return cls(host, api_key or None, hosts, origins, docs)

    def any_host(self) -> bool:
        """Whether the Host check lets every host through."""
        if "*" in self.allowed_hosts:
            return True
        return not self.allowed_hosts and not is_loopback(self.host) and self.api_key is not None

    def host_allowed(self, value: str) -> bool:
        """Whether a request whose Host header is `value` is served."""
        if self.any_host():
            return True
        name = _host_name(value)
        if name is None:
            return False
        if name in LOOPBACK_NAMES or name in self.allowed_hosts:
            return True
        if any(p.startswith("*.") and name.endswith(p[1:]) for p in self.allowed_hosts):
            return True
        # a rebound page's Host is the attacker's domain name, never an IP address
        return not is_loopback(self.host) and _is_ip(name)

    def origin_allowed(self, origin: str, host: str) -> bool:
        """Whether a request from a page of `origin` to `host` (its Host header) is served:
        the server's own origin, or a listed one."""
        origin = origin.lower().rstrip("/")
        if "*" in self.allowed_origins or origin in self.allowed_origins:
            return True
        parts = urlsplit(origin)
        default = {"http": ":80", "https": ":443"}.get(parts.scheme, "")
        own = host.lower().removesuffix(default)
        return bool(parts.netloc) and parts.netloc.removesuffix(default) == own

    def warning(self) -> str | None:
        """The warning for a server anyone on the network can use (a non-loopback bind without
        an API key), or None."""
        if is_loopback(self.host) or self.api_key is not None:
            return None
        return (f"serving on {self.host} without an API key: anyone who can reach this "
                f"machine can use the model; set --api-key (or CONSTRAIN_API_KEY), or bind "
                f"127.0.0.1")  # fmt: skip

    def documentation(self) -> dict[str, str | None]:
        """FastAPI's options for its documentation pages: served only with `docs`."""
        return {key: path if self.docs else None for key, path in DOCS_PATHS.items()}

    def install(self, app) -> None:
        """Put the checks in front of the FastAPI `app` (the Host and Origin checks outermost,
        then CORS when origins are allowed, then the key and the content type), and log the
        exposure warning."""
        app.add_middleware(_Refuse, check=self.refuse_request)
        if self.allowed_origins:
            app.add_middleware(
                CORSMiddleware, allow_origins=self.allowed_origins, allow_methods=["GET", "POST"],
                allow_headers=["*"], expose_headers=["Retry-After", "X-Constrain-Grammar-Syntax"],
                allow_private_network=True,
            )  # fmt: skip
        app.add_middleware(_Refuse, check=self.refuse_caller)
        if (message := self.warning()) is not None:
            log.warning(message)

    def refuse_caller(self, scope: dict) -> RequestError | None:
        """Checks 1 and 2: the Host and the Origin of an HTTP request, or None when it passes."""
        host = _header(scope, b"host")
        if host is not None and not self.host_allowed(host.decode("latin-1")):
            shown = host.decode("latin-1")
            return RequestError(f"Host {shown!r} is not served here (DNS rebinding protection); "
                                f"allow it with --allowed-hosts", status=400,
                                code="invalid_host")  # fmt: skip
        origin = _header(scope, b"origin")
        if origin is not None:
            shown = origin.decode("latin-1")
            if not self.origin_allowed(shown, (host or b"").decode("latin-1")):
                return RequestError(f"requests from pages of {shown!r} are not served; allow "
                                    f"the origin with --allowed-origins", status=403,
                                    code="origin_not_allowed")  # fmt: skip
        return None

    def refuse_request(self, scope: dict) -> RequestError | None:
        """Checks 3 and 4: the API key and a POST body's content type, or None when it passes."""
        if self.api_key is not None and not self._open(scope["path"]):
            scheme, _, token = (_header(scope, b"authorization") or b"").partition(b" ")
            if scheme.lower() != b"bearer" or not token.strip():
                return RequestError("missing API key: send it as the header "
                                    "'Authorization: Bearer <key>'", status=401,
                                    code="invalid_api_key")  # fmt: skip
            if not hmac.compare_digest(token.strip(), self.api_key.encode()):
                return RequestError("incorrect API key", status=401, code="invalid_api_key")
        if scope["method"] == "POST":
            kind = (_header(scope, b"content-type") or b"").decode("latin-1")
            if kind.partition(";")[0].strip().lower() != "application/json":
                return RequestError(f"the body must be sent as Content-Type: application/json "
                                    f"(not {kind or 'none'!r})", status=415,
                                    code="unsupported_media_type")  # fmt: skip
        return None

    def _open(self, path: str) -> bool:
        """Whether `path` is answered without the key: /health, and the docs when served."""
        docs = self.docs and (path in DOCS_PATHS.values() or path.startswith("/docs/"))
        return path in OPEN_PATHS or docs


class _Refuse:
    """ASGI middleware: answers an HTTP request that `check` refuses with the refusal, else
    passes it on."""

    def __init__(self, app, check):
        self.app, self.check = app, check

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and (refusal := self.check(scope)) is not None:
            headers = {"WWW-Authenticate": "Bearer"} if refusal.status == 401 else None
            response = JSONResponse(refusal.body(), status_code=refusal.status, headers=headers)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def is_loopback(host: str) -> bool:
    """Whether binding `host` serves this machine only (localhost, 127.0.0.0/8, ::1)."""
    name = host.strip("[]").lower()
    return name == "localhost" or (_is_ip(name) and ipaddress.ip_address(name).is_loopback)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _host_name(value: str) -> str | None:
    """The host of a Host header (``localhost:8000`` -> ``localhost``, ``[::1]:8000`` ->
    ``::1``), lowercased; None when it is not one."""
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, port = value[1:].partition("]")
        ok = bracket and (not port or (port[:1] == ":" and port[1:].isdigit()))
        return name if ok else None
    name, colon, port = value.partition(":")
    if colon and not port.isdigit():
        return None
    return name.rstrip(".") or None


def _header(scope: dict, name: bytes) -> bytes | None:
    """The first header `name` (lowercase) of the request, or None."""
    return next((value for key, value in scope["headers"] if key == name), None)


def _listed(value: str | Iterable[str] | None) -> list[str]:
    """A comma-separated list (or an iterable of them) as its non-empty entries."""
    if value is None:
        return []
    parts = value.split(",") if isinstance(value, str) else [p for v in value for p in v.split(",")]
    return [p.strip() for p in parts if p.strip()]
