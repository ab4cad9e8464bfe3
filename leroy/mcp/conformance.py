"""Fixtures for the MCP conformance suite: registered only when MCP_CONFORMANCE_FIXTURES is on, never in production.

The scenario names and expected payloads are those of @modelcontextprotocol/conformance 0.1.16 (active server suite).
"""

import asyncio
import base64
import json
import logging
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.types import (
    AudioContent,
    Completion,
    CompletionArgument,
    CompletionContext,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    PromptReference,
    ResourceTemplateReference,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, Field

logger = logging.getLogger(__name__)

PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV_EMPTY = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="


class _UserResponse(BaseModel):
    response: str = Field(description="User's response")


class _Defaults(BaseModel):
    name: str = Field(default="John Doe", description="User name")
    age: int = Field(default=30, description="User age")
    score: float = Field(default=95.5, description="User score")
    status: str = Field(
        default="active", description="User status", json_schema_extra={"enum": ["active", "inactive", "pending"]}
    )
    verified: bool = Field(default=True, description="Verification status")


class _Enums(BaseModel):
    untitledSingle: str = Field(description="Simple enum", json_schema_extra={"enum": ["active", "inactive"]})
    titledSingle: str = Field(
        description="Titled enum",
        json_schema_extra={"oneOf": [{"const": "low", "title": "Low"}, {"const": "high", "title": "High"}]},
    )
    untitledMulti: list[str] = Field(
        description="Multi-select", json_schema_extra={"items": {"type": "string", "enum": ["read", "write"]}}
    )
    titledMulti: list[str] = Field(
        description="Titled multi-select",
        json_schema_extra={"items": {"anyOf": [{"const": "bug", "title": "Bug"}, {"const": "docs", "title": "Docs"}]}},
    )
    legacyEnum: str = Field(
        description="Legacy enumNames",
        json_schema_extra={"enum": ["small", "large"], "enumNames": ["Small", "Large"]},
    )


def register(mcp: MCPServer) -> None:
    @mcp.tool()
    async def test_simple_text() -> str:
        """Simple text content."""
        return "This is a simple text response for testing."

    @mcp.tool()
    async def test_image_content() -> list[ImageContent]:
        """Image content."""
        return [ImageContent(type="image", data=PNG_1PX, mime_type="image/png")]

    @mcp.tool()
    async def test_audio_content() -> list[AudioContent]:
        """Audio content."""
        return [AudioContent(type="audio", data=WAV_EMPTY, mime_type="audio/wav")]

    @mcp.tool()
    async def test_embedded_resource() -> list[EmbeddedResource]:
        """Embedded resource content."""
        return [
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(
                    uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
                ),
            )
        ]

    @mcp.tool()
    async def test_multiple_content_types() -> list[TextContent | ImageContent | EmbeddedResource]:
        """Text, image and resource content together."""
        return [
            TextContent(type="text", text="Multiple content types test:"),
            ImageContent(type="image", data=PNG_1PX, mime_type="image/png"),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(
                    uri="test://mixed-content-resource",
                    mime_type="application/json",
                    text='{"test": "data", "value": 123}',
                ),
            ),
        ]

    @mcp.tool()
    async def test_tool_with_logging(ctx: Context) -> str:
        """Emits three log notifications."""
        for message in ("Tool execution started", "Tool processing data", "Tool execution completed"):
            await ctx.info(message)
            await asyncio.sleep(0.05)
        return "Tool with logging executed successfully"

    @mcp.tool()
    async def test_tool_with_progress(ctx: Context) -> str:
        """Reports progress 0, 50 and 100 of 100."""
        for step in (0, 50, 100):
            await ctx.report_progress(progress=step, total=100, message=f"Completed step {step} of 100")
            await asyncio.sleep(0.05)
        meta = ctx.request_context.meta
        return str(meta.get("progress_token", 0) if meta else 0)

    @mcp.tool()
    async def test_error_handling() -> str:
        """Always fails."""
        raise RuntimeError("This tool intentionally returns an error for testing")

    @mcp.tool()
    async def test_sampling(prompt: str, ctx: Context) -> str:
        """Asks the client for an LLM completion (needs a back-channel a stateless server lacks)."""
        from mcp.types import SamplingMessage

        result = await ctx.session.create_message(
            messages=[SamplingMessage(role="user", content=TextContent(type="text", text=prompt))], max_tokens=100
        )
        return f"LLM response: {getattr(result.content, 'text', 'No response')}"

    async def _elicit(ctx: Context, message: str, schema: type[BaseModel]) -> str:
        result = await ctx.elicit(message=message, schema=schema)
        content = result.data.model_dump_json() if result.action == "accept" else "{}"
        return f"User response: action={result.action}, content={content}"

    @mcp.tool()
    async def test_elicitation(message: str, ctx: Context) -> str:
        """Asks the client for user input."""
        return await _elicit(ctx, message, _UserResponse)

    @mcp.tool()
    async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
        """Elicitation with defaults."""
        return await _elicit(ctx, "Please provide user information", _Defaults)

    @mcp.tool()
    async def test_elicitation_sep1330_enums(ctx: Context) -> str:
        """Elicitation with enum variants."""
        return await _elicit(ctx, "Please select values", _Enums)

    @mcp.resource("test://static-text", mime_type="text/plain")
    async def static_text() -> str:
        """A static text resource."""
        return "This is the content of the static text resource."

    @mcp.resource("test://static-binary", mime_type="image/png")
    async def static_binary() -> bytes:
        """A static binary resource."""
        return base64.b64decode(PNG_1PX)

    @mcp.resource("test://template/{id}/data", mime_type="application/json")
    async def template(id: str) -> str:
        """A resource template."""
        return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})

    @mcp.resource("test://watched-resource", mime_type="text/plain")
    async def watched() -> str:
        """A resource that can be subscribed to."""
        return "Watched resource content"

    @mcp.prompt()
    async def test_simple_prompt() -> list[UserMessage]:
        """A prompt without arguments."""
        return [UserMessage(content=TextContent(type="text", text="This is a simple prompt for testing."))]

    @mcp.prompt()
    async def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
        """A prompt with arguments."""
        return [
            UserMessage(content=TextContent(type="text", text=f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"))
        ]

    @mcp.prompt()
    async def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
        """A prompt embedding a resource."""
        return [
            UserMessage(
                content=EmbeddedResource(
                    type="resource",
                    resource=TextResourceContents(
                        uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
                    ),
                )
            ),
            UserMessage(content=TextContent(type="text", text="Please process the embedded resource above.")),
        ]

    @mcp.prompt()
    async def test_prompt_with_image() -> list[UserMessage]:
        """A prompt with an image."""
        return [
            UserMessage(content=ImageContent(type="image", data=PNG_1PX, mime_type="image/png")),
            UserMessage(content=TextContent(type="text", text="Please analyze the image above.")),
        ]

    @mcp.completion()
    async def complete(
        ref: PromptReference | ResourceTemplateReference,
        argument: CompletionArgument,
        context: CompletionContext | None,
    ) -> Completion:
        return Completion(values=[], total=0, has_more=False)

    async def set_level(ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
        logger.info("conformance: log level set to %s", params.level)
        return EmptyResult()

    async def subscribe(ctx: Any, params: SubscribeRequestParams | UnsubscribeRequestParams) -> EmptyResult:
        return EmptyResult()

    lowlevel = mcp._lowlevel_server
    lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)
    lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, subscribe)
