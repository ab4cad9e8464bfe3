// The official MCP JavaScript SDK against a live Leroy: list tools, then call evaluate_current_setup and get_usage
// LEROY_ROUNDS times each on one connection. Prints one JSON summary; any thrown error exits non-zero.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const { LEROY_MCP_URL: url, LEROY_KEY: key, LEROY_ROUNDS: rounds, LEROY_SYMBOL: symbol } = process.env;
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${key}` } },
});
const client = new Client({ name: "leroy-e2e-js", version: "1.0.0" });
await client.connect(transport);
const listed = await client.listTools();
const calls = [];
for (let round = 0; round < Number(rounds); round++) {
  for (const [name, args] of [["evaluate_current_setup", { symbol, side: "buy" }], ["get_usage", {}]]) {
    const result = await client.callTool({ name, arguments: args });
    calls.push({ name, isError: result.isError ?? false, keys: Object.keys(result.structuredContent ?? {}).sort(), code: result.structuredContent?.error?.code });
  }
}
console.log(JSON.stringify({ protocolVersion: transport.protocolVersion, tools: listed.tools.length, calls }));
await client.close();
