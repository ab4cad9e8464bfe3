"""Schema pieces every app's tool arguments share; the ground floor: imports no app and nothing of leroy.mcp."""

from pydantic import BaseModel, ConfigDict


class ToolArgs(BaseModel):
    """Base of every tool's arguments: unknown fields are refused, never ignored."""

    model_config = ConfigDict(extra="forbid")
