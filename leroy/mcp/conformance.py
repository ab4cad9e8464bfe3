"""Fixtures for the MCP conformance suite: registered only when MCP_CONFORMANCE_FIXTURES is on, never in production.

The scenario names and expected payloads are those of @modelcontextprotocol/conformance 0.2.0-alpha.12 (the
2025-11-25 active suite and the 2026-07-28 requirement set).
"""

import asyncio
import base64
import json
import logging
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.shared.exceptions import MCPError
from mcp.types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    AudioContent,
    ClientCapabilities,
    Completion,
    CompletionArgument,
    CompletionContext,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    InputRequiredResult,
    MissingRequiredClientCapabilityErrorData,
    PromptReference,
    ResourceTemplateReference,
    SamplingCapability,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, ConfigDict, Field

logger = logging.getLogger(__name__)

PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
WAV_EMPTY = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="


# The json-schema-2020-12 scenario's inputSchema, verbatim: it checks that 2020-12 keywords ($schema, $defs with an
# $anchor, allOf/anyOf, if/then/else, additionalProperties) reach tools/list unstripped.
JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


# SEP-2243: a parameter the client mirrors into an `Mcp-Param-Region` header (Base64 when not plain ASCII).
CUSTOM_HEADER_SCHEMA = {
    "type": "object",
    "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
    "required": ["region"],
}


class _AnyArguments(ArgModelBase):
    """Hands the call's arguments through whole: the published 2020-12 schema is the contract, not a model."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


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

    async def json_schema_2020_12_tool(arguments: dict[str, Any]) -> str:
        return "ok"

    mcp.add_tool(json_schema_2020_12_tool, description="Tool with JSON Schema 2020-12 features")
    schema_tool = mcp._tool_manager.get_tool("json_schema_2020_12_tool")
    assert schema_tool is not None
    schema_tool.parameters = JSON_SCHEMA_2020_12
    schema_tool.fn_metadata.arg_model = _AnyArguments

    async def test_custom_header(arguments: dict[str, Any]) -> str:
        return f"region={arguments.get('region')}"

    mcp.add_tool(test_custom_header, description="Echoes its region, which the client also sends as Mcp-Param-Region")
    header_tool = mcp._tool_manager.get_tool("test_custom_header")
    assert header_tool is not None
    header_tool.parameters = CUSTOM_HEADER_SCHEMA  # the SDK validates Mcp-Param-* headers against x-mcp-header
    header_tool.fn_metadata.arg_model = _AnyArguments

    _register_input_required(mcp)

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


# Multi-round-trip (2026-07-28, SEP-2322): the server asks for client input in its result and the client retries the
# same request with `inputResponses` (and the echoed `requestState`, which the SDK's RequestStateBoundary seals and
# verifies, so a tampered one is refused before a handler runs). Nothing is held between rounds: stateless by design.
def _elicitation(message: str, field: str, kind: str = "string") -> dict[str, Any]:
    schema = {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}
    return {"method": "elicitation/create", "params": {"message": message, "requestedSchema": schema}}


def _sampling(text: str, max_tokens: int) -> dict[str, Any]:
    message = {"role": "user", "content": {"type": "text", "text": text}}
    return {"method": "sampling/createMessage", "params": {"messages": [message], "maxTokens": max_tokens}}


ROOTS = {"method": "roots/list", "params": {}}


def _ask(requests: dict[str, dict[str, Any]], state: str | None = None) -> InputRequiredResult:
    wire: dict[str, Any] = {"resultType": "input_required", "inputRequests": requests}
    if state is not None:
        wire["requestState"] = state
    return InputRequiredResult.model_validate(wire)


def _answers(ctx: Context) -> dict[str, Any]:
    """The client's responses as plain JSON, keyed as asked; anything unrecognised is simply not looked up."""
    responses = ctx.input_responses or {}
    return {
        key: value.model_dump(by_alias=True, exclude_none=True) if isinstance(value, BaseModel) else value
        for key, value in responses.items()
    }


def _accepted(answer: Any, field: str) -> str | None:
    if not isinstance(answer, dict) or answer.get("action") != "accept" or not isinstance(answer.get("content"), dict):
        return None
    value = answer["content"].get(field)
    return None if value is None else str(value)


def _sampled_text(answer: Any) -> str | None:
    content = answer.get("content") if isinstance(answer, dict) else None
    return content.get("text") if isinstance(content, dict) and isinstance(content.get("text"), str) else None


def _register_input_required(mcp: MCPServer) -> None:
    user_name = _elicitation("What is your name?", "name")

    @mcp.tool()
    async def test_input_required_result_elicitation(ctx: Context) -> str | InputRequiredResult:
        """Asks for the user's name through an InputRequiredResult."""
        name = _accepted(_answers(ctx).get("user_name"), "name")
        return _ask({"user_name": user_name}) if name is None else f"Hello, {name}!"

    @mcp.tool()
    async def test_input_required_result_sampling(ctx: Context) -> str | InputRequiredResult:
        """Asks the client's LLM a question through an InputRequiredResult."""
        text = _sampled_text(_answers(ctx).get("capital_question"))
        if text is None:
            return _ask({"capital_question": _sampling("What is the capital of France?", 100)})
        return f"LLM response: {text}"

    @mcp.tool()
    async def test_input_required_result_list_roots(ctx: Context) -> str | InputRequiredResult:
        """Asks for the client's roots through an InputRequiredResult."""
        answer = _answers(ctx).get("client_roots")
        roots = answer.get("roots") if isinstance(answer, dict) else None
        if not isinstance(roots, list):
            return _ask({"client_roots": ROOTS})
        return "Roots: " + ", ".join(str(root.get("uri")) for root in roots if isinstance(root, dict))

    @mcp.tool()
    async def test_input_required_result_request_state(ctx: Context) -> str | InputRequiredResult:
        """Round-trips an opaque requestState."""
        if ctx.request_state != "confirm-pending" or _accepted(_answers(ctx).get("confirm"), "ok") is None:
            return _ask({"confirm": _elicitation("Please confirm", "ok", "boolean")}, "confirm-pending")
        return "state-ok: confirmed"

    @mcp.tool()
    async def test_input_required_result_multiple_inputs(ctx: Context) -> str | InputRequiredResult:
        """Asks for an elicitation, a sampling and the roots at once."""
        answers = _answers(ctx)
        requests = {
            "user_name": user_name,
            "greeting": _sampling("Generate a greeting", 50),
            "client_roots": ROOTS,
        }
        if ctx.request_state != "all-three" or not set(requests) <= set(answers):
            return _ask(requests, "all-three")
        return f"Got all inputs: {_accepted(answers['user_name'], 'name')}, {_sampled_text(answers['greeting'])}"

    @mcp.tool()
    async def test_input_required_result_multi_round(ctx: Context) -> str | InputRequiredResult:
        """Two rounds of elicitation, the state naming the round."""
        answers = _answers(ctx)
        if ctx.request_state == "round-2" and (color := _accepted(answers.get("step2"), "color")) is not None:
            return f"Done: favorite color {color}"
        if ctx.request_state in {"round-1", "round-2"} and _accepted(answers.get("step1"), "name") is not None:
            return _ask({"step2": _elicitation("Step 2: What is your favorite color?", "color")}, "round-2")
        return _ask({"step1": _elicitation("Step 1: What is your name?", "name")}, "round-1")

    @mcp.tool()
    async def test_input_required_result_tampered_state(ctx: Context) -> str | InputRequiredResult:
        """Its requestState is sealed by the SDK; a tampered echo is refused before this runs."""
        if ctx.request_state == "sealed" and _accepted(_answers(ctx).get("confirm"), "ok") is not None:
            return "state verified"
        return _ask({"confirm": _elicitation("Please confirm", "ok", "boolean")}, "sealed")

    @mcp.tool()
    async def test_missing_capability(ctx: Context) -> str:
        """Needs the client's sampling capability; refuses with -32021 when it was not declared (SEP-2575)."""
        caps = ctx.client_capabilities
        if caps is None or caps.sampling is None:
            data = MissingRequiredClientCapabilityErrorData(
                required_capabilities=ClientCapabilities(sampling=SamplingCapability())
            )
            raise MCPError(
                code=MISSING_REQUIRED_CLIENT_CAPABILITY,
                message="test_missing_capability needs the client's sampling capability",
                data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
            )
        return "The client declared sampling"

    @mcp.tool()
    async def test_input_required_result_capabilities(ctx: Context) -> str | InputRequiredResult:
        """Asks only for what the client declared it can answer."""
        answers = _answers(ctx)
        if answers:
            return "Capabilities respected"
        caps = ctx.client_capabilities
        requests: dict[str, dict[str, Any]] = {}
        if caps is not None and caps.sampling is not None:
            requests["capital_question"] = _sampling("What is the capital of France?", 100)
        if caps is not None and caps.elicitation is not None:
            requests["user_name"] = user_name
        if caps is not None and caps.roots is not None:
            requests["client_roots"] = ROOTS
        return _ask(requests) if requests else "The client declared no input capability"

    @mcp.prompt()
    async def test_input_required_result_prompt(ctx: Context) -> list[UserMessage] | InputRequiredResult:
        """A prompt that needs the user's context first."""
        context = _accepted(_answers(ctx).get("user_context"), "context")
        if context is None:
            return _ask({"user_context": _elicitation("What context should the prompt use?", "context")})
        return [UserMessage(content=TextContent(type="text", text=f"Prompt with context: {context}"))]
