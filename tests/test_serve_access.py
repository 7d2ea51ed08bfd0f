"""Who may use `constrain serve` (constrain.serve.access): the API key with the official
`openai` client and with httpx, the Host check against DNS rebinding, Origin and CORS, JSON-only
bodies, the documentation pages off by default, and the warning for a public address.

One server on 127.0.0.1 (with a key and one allowed origin) serves the module; the other
settings are checked on applications built without binding (httpx's ASGI transport) or on
`Access` itself. Refusals are checked to come before any work: a schema that takes seconds to
compile is refused at once, and /metrics shows nothing accepted or compiled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time

import httpx
import pytest
from served import NAME

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")

from constrain import serve  # noqa: E402
from constrain.serve.access import Access, is_loopback  # noqa: E402

KEY = "sk-test-0123456789"
APP = "http://app.example"  # the one origin the module's server allows
EVIL = "http://evil.example"
# compiles in seconds (a 2^14-state DFA): a refusal that came after reading it would show
SLOW = {
    "model": NAME,
    "messages": [{"role": "user", "content": "Hi."}],
    "max_tokens": 4,
    "response_format": {"type": "json_schema", "json_schema": {"name": "slow", "schema": {
        "type": "object", "properties": {"s": {"type": "string", "pattern": "^[ab]*a[ab]{14}$"}},
        "required": ["s"]}}},
}  # fmt: skip


@pytest.fixture(scope="module")
def url(smollm):
    with serve.serving(smollm, name=NAME, max_tokens=16, timeout=30, api_key=KEY,
                       allowed_origins=APP) as base:  # fmt: skip
        yield base


def client(url: str, key: str):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, timeout=60, max_retries=0)


def get(url: str, path: str, key: str | None = KEY, **headers) -> httpx.Response:
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.get(f"{url}{path}", headers=headers, timeout=30)


def counters(url: str) -> tuple[int, int]:
    """(requests accepted, constraints compiled) from /metrics."""
    text = get(url, "/metrics").text
    found = [re.search(rf"^\w*{name} (\d+)", text, re.M) for name in
             ("requests_total", "compile_cache_misses_total")]  # fmt: skip
    return int(found[0].group(1)), int(found[1].group(1))


def assert_openai_error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code and body["error"]["type"] == "invalid_request_error"
    return body["error"]


def test_the_right_key_serves_the_openai_client(url):
    c = client(url, KEY)
    assert [m.id for m in c.models.list()] == [NAME]
    r = c.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi."}],
                                  max_tokens=4, temperature=0)  # fmt: skip
    assert r.choices[0].message.content is not None


def test_a_wrong_key_raises_the_sdk_s_authentication_error(url):
    c = client(url, "wrong-key")
    for call in (c.models.list, lambda: c.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "Hi."}], max_tokens=4)):  # fmt: skip
        with pytest.raises(openai.AuthenticationError) as raised:
            call()
        assert raised.value.status_code == 401 and raised.value.code == "invalid_api_key"


@pytest.mark.parametrize("key", ["wrong-key", None])
def test_a_wrong_or_missing_key_is_openai_s_401(url, key):
    for path in ("/v1/models", "/metrics", f"/v1/models/{NAME}"):
        response = get(url, path, key=key)
        error = assert_openai_error(response, 401, "invalid_api_key")
        assert KEY not in error["message"]
        assert response.headers["www-authenticate"] == "Bearer"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    posted = httpx.post(f"{url}/v1/completions", json={"model": NAME, "prompt": "a"},
                        headers=headers, timeout=30)  # fmt: skip
    assert_openai_error(posted, 401, "invalid_api_key")
    assert get(url, "/v1/models", key=None, Authorization=f"Basic {KEY}").status_code == 401


def test_health_is_open_without_the_key(url):
    response = get(url, "/health", key=None)
    assert response.status_code == 200 and response.json()["status"] == "ok"


def test_a_foreign_host_is_refused(url):
    for path in ("/health", "/v1/models"):
        error = assert_openai_error(get(url, path, Host="evil.example"), 400, "invalid_host")
        assert "evil.example" in error["message"]
    assert get(url, "/v1/models", Host="evil.example:8000").status_code == 400
    for host in ("localhost", "localhost:1234", "127.0.0.1:9", "[::1]:8000", "LocalHost"):
        assert get(url, "/v1/models", Host=host).status_code == 200, host


def test_a_cross_origin_request_is_refused_before_any_work(url):
    before = counters(url)
    started = time.monotonic()
    posted = httpx.post(f"{url}/v1/chat/completions", json=SLOW, timeout=30,
                        headers={"Authorization": f"Bearer {KEY}", "Origin": EVIL})  # fmt: skip
    assert time.monotonic() - started < 1.0
    error = assert_openai_error(posted, 403, "origin_not_allowed")
    assert EVIL in error["message"]
    preflight = httpx.options(f"{url}/v1/chat/completions", timeout=30, headers={
        "Origin": EVIL, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})  # fmt: skip
    assert preflight.status_code == 403
    assert not any(h.startswith("access-control-") for h in preflight.headers)
    assert get(url, "/health", Origin="null").status_code == 403  # a sandboxed page, a file
    assert counters(url) == before


def test_a_text_plain_body_is_415_before_any_work(url):
    before = counters(url)
    started = time.monotonic()
    posted = httpx.post(f"{url}/v1/chat/completions", content=json.dumps(SLOW), timeout=30,
                        headers={"Authorization": f"Bearer {KEY}",
                                 "Content-Type": "text/plain;charset=UTF-8"})  # fmt: skip
    assert time.monotonic() - started < 1.0
    error = assert_openai_error(posted, 415, "unsupported_media_type")
    assert "text/plain" in error["message"]
    form = httpx.post(f"{url}/v1/completions", data={"prompt": "a"}, timeout=30,
                      headers={"Authorization": f"Bearer {KEY}"})  # fmt: skip
    assert_openai_error(form, 415, "unsupported_media_type")
    assert counters(url) == before


def test_an_allowed_origin_gets_cors_headers(url):
    preflight = httpx.options(f"{url}/v1/chat/completions", timeout=30, headers={
        "Origin": APP, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})  # fmt: skip
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == APP
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    listed = get(url, "/v1/models", Origin=APP)
    assert listed.status_code == 200 and listed.headers["access-control-allow-origin"] == APP
    refused = get(url, "/v1/models", key="wrong", Origin=APP)  # the page can read why
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == APP
    assert get(url, "/v1/models", Origin=url).status_code == 200  # the server's own origin


def test_the_documentation_is_off_by_default(url):
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert get(url, path).status_code == 404, path


# settings other than the module server's: applications built, not bound


def asgi(app, method: str, path: str, **headers) -> httpx.Response:
    async def call():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as c:
            return await c.request(method, path, headers=headers)

    return asyncio.run(call())


def test_documentation_and_no_origins_configured(smollm):
    app = serve.build(smollm, name=NAME, docs=True)
    assert asgi(app, "GET", "/openapi.json").json()["info"]["title"] == "constrain"
    assert asgi(app, "GET", "/docs").status_code == 200
    keyed = serve.build(smollm, name=NAME, docs=True, api_key=KEY)
    assert asgi(keyed, "GET", "/openapi.json").status_code == 200  # the docs need no key
    assert asgi(keyed, "GET", "/v1/models").status_code == 401
    preflight = asgi(app, "OPTIONS", "/v1/chat/completions", Origin=APP,
                     **{"Access-Control-Request-Method": "POST"})  # fmt: skip
    assert preflight.status_code == 403
    assert not any(h.startswith("access-control-") for h in preflight.headers)
    assert asgi(app, "GET", "/v1/models", Origin="http://127.0.0.1:8000").status_code == 200


def test_a_public_address_without_a_key_is_warned_about(smollm, caplog):
    assert Access("0.0.0.0").warning() is not None and "0.0.0.0" in Access("0.0.0.0").warning()
    for host in ("::", "192.168.1.20", "myhost.local"):
        assert Access(host).warning() is not None, host
    for quiet in (Access("127.0.0.1"), Access("localhost"), Access("::1"),
                  Access("0.0.0.0", api_key=KEY)):  # fmt: skip
        assert quiet.warning() is None, quiet
    with caplog.at_level(logging.WARNING, logger="constrain.serve"):
        serve.build(smollm, name=NAME, host="0.0.0.0")
    assert any("without an API key" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="constrain.serve"):
        serve.build(smollm, name=NAME, host="0.0.0.0", api_key=KEY)
        serve.build(smollm, name=NAME)
    assert not caplog.records


def test_the_host_policy():
    loopback = Access.of("127.0.0.1")
    assert all(map(loopback.host_allowed, ["localhost", "127.0.0.1:80", "[::1]", "localhost."]))
    for host in ("evil.example", "10.0.0.5", "::1", "[::1", "localhost:x", ""):
        assert not loopback.host_allowed(host), host
    listed = Access.of("127.0.0.1", allowed_hosts="box.lan, *.corp.example:8000")
    assert listed.host_allowed("box.lan:8000") and listed.host_allowed("a.corp.example")
    assert not listed.host_allowed("corp.example") and not listed.host_allowed("evil.example")
    assert Access.of("127.0.0.1", allowed_hosts=["*"]).host_allowed("anything.example")
    public = Access.of("0.0.0.0")  # no key: names only the loopback ones, any IP address
    assert public.host_allowed("192.168.1.20:8000") and public.host_allowed("[fe80::1]")
    assert not public.host_allowed("evil.example")
    assert Access.of("0.0.0.0", api_key=KEY).host_allowed("evil.example")  # the key guards
    assert not Access.of("::", api_key=KEY, allowed_hosts="box.lan").host_allowed("evil.example")
    assert is_loopback("127.0.0.2") and is_loopback("[::1]") and not is_loopback("0.0.0.0")


def test_the_command_line_passes_the_settings(smollm, monkeypatch, capsys):
    import constrain.models
    from constrain import cli
    from constrain.serve.app import Server

    ran = {}
    monkeypatch.setattr(serve, "run", lambda model, **options: ran.update(options))
    cli.main(["serve", "--api-key", "k1", "--allowed-hosts", "a,b", "--allowed-origins",
              APP, "--docs"])  # fmt: skip
    assert (ran["api_key"], ran["allowed_hosts"], ran["allowed_origins"], ran["docs"]) == (
        "k1", "a,b", APP, True)  # fmt: skip
    monkeypatch.setenv("CONSTRAIN_API_KEY", "k2")
    cli.main(["serve"])
    assert ran["api_key"] == "k2" and ran["allowed_origins"] is None and ran["docs"] is False
    # the warning is printed: `run` builds the application (not served here)
    monkeypatch.undo()
    monkeypatch.delenv("CONSTRAIN_API_KEY", raising=False)
    monkeypatch.setattr(constrain.models, "load_model", lambda *a, **k: smollm)
    # the server is built, configured and never started
    monkeypatch.setattr(Server, "run", lambda server: ran.update(config=server.config))
    cli.main(["serve", "--host", "0.0.0.0"])
    assert ran["config"].host == "0.0.0.0"
    err = capsys.readouterr().err
    assert err.count("constrain: warning: serving on 0.0.0.0 without an API key") == 1, err
