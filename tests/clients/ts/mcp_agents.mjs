// Drives the MCP server with the official TypeScript SDK clients, as agents would, and prints what
// each agent reached as one JSON document on stdout (the pytest side asserts on it).
//
//   node mcp_agents.mjs PLAN.json
//
// PLAN: {
//   "connect": {"kind": "stdio", "command": ..., "args": [...], "env": {...}}
//            | {"kind": "http", "url": ..., "headers": {...}},
//   "clients": ["sdk1", "sdk2-legacy", "sdk2-auto"],
//   "calls": [{"name": ..., "tool": ..., "arguments": {...}}, ...]
// }
//
// Each client connects once and makes every call in turn. A call's one result is seen twice:
//   content_agent     reads only the text of content[] (a window's JSON header line, the text
//                     after it; an error's JSON envelope) and reports the header and the code
//   structured_agent  reads only structuredContent, or an error result's _meta.error
// `thrown` is set when the SDK itself threw instead of handing the result over (the failure a
// success-shaped outputSchema used to cause on errors).

import { readFileSync } from "node:fs";

import { Client as Client1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport as Stdio1 } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport as Http1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  Client as Client2,
  StreamableHTTPClientTransport as Http2,
} from "@modelcontextprotocol/client";
import { StdioClientTransport as Stdio2 } from "@modelcontextprotocol/client/stdio";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));
const INFO = { name: "pdpp-store-tests", version: "1.0.0" };

function transport(sdk) {
  const connect = plan.connect;
  if (connect.kind === "stdio") {
    const Stdio = sdk === 1 ? Stdio1 : Stdio2;
    return new Stdio({
      command: connect.command,
      args: connect.args,
      env: connect.env,
      stderr: "ignore",
    });
  }
  const Http = sdk === 1 ? Http1 : Http2;
  return new Http(new URL(connect.url), { requestInit: { headers: connect.headers } });
}

async function connected(name) {
  if (name === "sdk1") {
    const client = new Client1(INFO, { capabilities: {} });
    await client.connect(transport(1));
    return client;
  }
  const mode = name === "sdk2-auto" ? "auto" : "legacy";
  const client = new Client2(INFO, { capabilities: {}, mode });
  await client.connect(transport(2));
  return client;
}

function contentAgent(result) {
  const text = (result.content ?? [])
    .filter((block) => block.type === "text")
    .map((block) => block.text)
    .join("\n");
  const newline = text.indexOf("\n");
  const first = newline < 0 ? text : text.slice(0, newline);
  let header = null;
  try {
    header = JSON.parse(first);
  } catch {
    header = null;
  }
  const seen = { header, text, links: (result.content ?? []).filter((b) => b.type === "resource_link").length };
  if (result.isError) {
    seen.code = JSON.parse(text).error.code;
  }
  return seen;
}

function structuredAgent(result) {
  if (result.isError) {
    return { structured: result.structuredContent ?? null, code: result._meta?.error?.code ?? null, error: result._meta?.error ?? null };
  }
  return { structured: result.structuredContent ?? null };
}

async function run(name) {
  const report = { tools: null, calls: {} };
  let client;
  try {
    client = await connected(name);
  } catch (error) {
    return { connect_error: String(error?.message ?? error) };
  }
  try {
    const listed = await client.listTools();
    report.tools = listed.tools.map((tool) => ({
      name: tool.name,
      output_schema: tool.outputSchema !== undefined,
    }));
    for (const call of plan.calls) {
      const seen = { thrown: null, is_error: null };
      try {
        const result = await client.callTool({ name: call.tool, arguments: call.arguments });
        seen.is_error = result.isError === true;
        seen.content_agent = contentAgent(result);
        seen.structured_agent = structuredAgent(result);
      } catch (error) {
        seen.thrown = String(error?.message ?? error);
      }
      report.calls[call.name] = seen;
    }
  } finally {
    await client.close();
  }
  return report;
}

const out = {};
for (const name of plan.clients) {
  out[name] = await run(name);
}
process.stdout.write(JSON.stringify(out));
