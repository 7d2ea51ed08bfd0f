"""`RequestError`: a request the server cannot serve as asked, answered in OpenAI's error shape."""

from __future__ import annotations

from constrain.errors import ConstrainError

__all__ = ["RequestError"]


class RequestError(ConstrainError, ValueError):
    """A bad request: `param` names the request field (``response_format.json_schema.schema``,
    ``tools[1].function.parameters``), `status` the HTTP status (400, 404, 429, ...)."""

    def __init__(
        self, message: str, param: str | None = None, *, status: int = 400, code: str | None = None
    ):
        super().__init__(message)
        self.message, self.param, self.status, self.code = message, param, status, code

    def body(self) -> dict:
        """The error as OpenAI writes it: ``{"error": {"message", "type", "param", "code"}}``."""
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {
            "error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        }
