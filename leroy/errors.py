"""The one refusal type of Leroy's domain, shared by every app."""

from typing import Any


class DomainError(Exception):
    """A rule refused the request and nothing changed: no charge, no partial row.

    `code` is machine-readable. MCP tools return it in band (`isError` with `error.code`, see leroy.mcp.server);
    the REST mirror returns the same object as JSON.
    """

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def payload(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.details}}
