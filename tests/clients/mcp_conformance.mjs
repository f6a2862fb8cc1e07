// MCP conformance of Warden, driven by the official TypeScript SDK
// (@modelcontextprotocol/sdk, pinned in tests/clients/package.json; `.ci/run` installs it
// into target/mcp-ts), for Warden's end-to-end conformance tests (tests/mcp_conformance.rs).
//
//     node mcp_conformance.mjs stdio|http MARKER COMMAND...
//
// The same checks as mcp_conformance.py, from the other official SDK: initialize with
// every protocol version the SDK offers, ping, list the tools and compile every schema
// with Ajv (JSON Schema 2020-12), call every tool (allowed, denied, asked with no
// approver, invalid arguments) with the SDK validating each structured result against its
// output schema, progress, and cancelling a running exec (its process is gone). Prints
// `ok NAME` per check, exits non-zero on the first failure; then starts `sleep MARKER2`,
// prints `holding` and waits to be killed.

import { readdirSync, readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Protocol } from '@modelcontextprotocol/sdk/shared/protocol.js';
import {
  CallToolResultSchema,
  EmptyResultSchema,
  InitializeResultSchema,
  ListToolsResultSchema,
  McpError,
  SUPPORTED_PROTOCOL_VERSIONS,
} from '@modelcontextprotocol/sdk/types.js';
import Ajv2020 from 'ajv/dist/2020.js';

const TOOLS = ['exec', 'process', 'read', 'write', 'edit', 'list', 'grep', 'session'];
const [transportKind, marker, ...target] = process.argv.slice(2);

function ok(name) {
  console.log(`ok ${name}`);
}

function check(condition, name, detail = '') {
  if (!condition) {
    console.log(`FAIL ${name}: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`);
    process.exit(1);
  }
  ok(name);
}

// How many processes have exactly the command line `sleep MARKER`.
function sleeps(m) {
  let count = 0;
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'latin1').replace(/\0$/, '').split('\0');
      if (argv.length === 2 && argv[0] === 'sleep' && argv[1] === m) count += 1;
    } catch {
      // gone meanwhile
    }
  }
  return count;
}

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(condition, what, ms = 30000) {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) check(false, what, 'timed out');
    await pause(10);
  }
}

function transport() {
  if (transportKind === 'stdio') {
    return new StdioClientTransport({ command: target[0], args: target.slice(1), env: process.env, stderr: 'inherit' });
  }
  return new StreamableHTTPClientTransport(new URL(target[0]), {
    requestInit: { headers: { Authorization: `Bearer ${process.env.WARDEN_TOKEN}` } },
  });
}

function client() {
  return new Client({ name: 'warden-conformance', version: '1' }, { capabilities: {} });
}

// `initialize` proposing `version`: connect without the SDK's own handshake (it always
// proposes its latest), then the handshake by hand.
async function versions() {
  for (const version of SUPPORTED_PROTOCOL_VERSIONS) {
    const c = client();
    const t = transport();
    await Protocol.prototype.connect.call(c, t);
    const result = await c.request(
      { method: 'initialize', params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'warden-conformance', version: '1' } } },
      InitializeResultSchema,
    );
    // A version the server does not know is answered with one it does (and the SDK takes).
    check(SUPPORTED_PROTOCOL_VERSIONS.includes(result.protocolVersion), `initialize ${version}`, result.protocolVersion);
    if (['2024-11-05', '2025-03-26', '2025-06-18', '2025-11-25'].includes(version)) {
      check(result.protocolVersion === version, `initialize ${version} keeps the version`, result.protocolVersion);
    }
    t.setProtocolVersion?.(result.protocolVersion);
    await c.notification({ method: 'notifications/initialized' });
    await c.request({ method: 'ping' }, EmptyResultSchema);
    ok(`ping ${version}`);
    const tools = await c.request({ method: 'tools/list' }, ListToolsResultSchema);
    check(JSON.stringify(tools.tools.map((x) => x.name)) === JSON.stringify(TOOLS), `tools/list ${version}`, tools.tools.map((x) => x.name));
    await c.close();
  }
}

function checkSchemas(tools) {
  // Ajv's defaults, as a client would use them: unknown keywords are errors.
  const ajv = new Ajv2020({ allErrors: true, logger: false });
  for (const tool of tools) {
    for (const [kind, schema] of [['input', tool.inputSchema], ['output', tool.outputSchema]]) {
      let compiled = null;
      try {
        compiled = ajv.compile(schema);
      } catch (e) {
        check(false, `${tool.name} ${kind} schema compiles`, String(e));
      }
      check(typeof compiled === 'function' && schema.type === 'object', `${tool.name} ${kind} schema compiles (Ajv, 2020-12)`);
      const roots = ['oneOf', 'anyOf', 'allOf', 'not', 'if', 'then', 'else'].filter((k) => k in schema);
      check(roots.length === 0, `${tool.name} ${kind} schema has a flat root`, roots);
    }
    const a = tool.annotations ?? {};
    check(tool.title && a.title, `${tool.name} has a title`);
    check(a.readOnlyHint === ['read', 'list', 'grep'].includes(tool.name), `${tool.name} readOnlyHint`, a);
    if (['exec', 'write', 'edit'].includes(tool.name)) check(a.destructiveHint === true, `${tool.name} destructiveHint`, a);
    check(typeof a.openWorldHint === 'boolean', `${tool.name} openWorldHint`, a);
  }
}

async function refused(c, name, args, field) {
  try {
    await c.callTool({ name, arguments: args });
  } catch (e) {
    check(e instanceof McpError && e.code === -32602 && e.message.includes(`\`${field}\``), `${name} ${JSON.stringify(args)} refused naming ${field}`, String(e));
    return;
  }
  check(false, `${name} ${JSON.stringify(args)} refused`, 'it was accepted');
}

async function calls(c) {
  // callTool validates every structuredContent against the tool's outputSchema.
  let r = await c.callTool({ name: 'exec', arguments: { argv: ['echo', 'hello'] } });
  let v = r.structuredContent;
  check(!r.isError && v.status === 'finished' && v.exitCode === 0 && v.stdout === 'hello\n', 'exec allowed', v);
  const text = r.content[0].text;
  check(text.startsWith('exit code 0') && text.includes('--- stdout (6 bytes) ---\nhello\n') && text.indexOf('stdout') < text.indexOf('stderr'), 'exec content[0] is the whole result', text);
  const first = v.runId;

  r = await c.callTool({ name: 'exec', arguments: { command: 'echo no', security: 'deny' } });
  v = r.structuredContent;
  check(r.isError && v.status === 'denied' && v.exitCode === 77, 'exec denied', v);
  check(v.message.startsWith('denied (') && v.message.includes(v.rule), 'a denial says why in words', v);
  check(r.content.length === 2 && r.content[1].text.startsWith('System events') && r.content[1].text.includes(`id=${first}, code=0)`) && !r.content[1].text.includes('hello'), 'events in their own block, one line per returned run', r.content);

  r = await c.callTool({ name: 'exec', arguments: { command: 'echo asked', ask: 'always' } });
  v = r.structuredContent;
  check(r.isError && v.reason === 'no-approver' && v.exitCode === 75, 'exec asked with no approver', v);

  r = await c.callTool({ name: 'exec', arguments: { argv: ['printf', 'ok \\377\\376 end'] } });
  check(Buffer.from(r.structuredContent.stdoutBase64, 'base64').equals(Buffer.from([0x6f, 0x6b, 0x20, 0xff, 0xfe, 0x20, 0x65, 0x6e, 0x64])), 'non-UTF-8 output is lossless', r.structuredContent);

  for (const [name, args] of [
    ['read', { path: 'notes.txt', offset: 1, limit: 2 }],
    ['write', { path: 'out/ts.txt', content: 'one two\n' }],
    ['edit', { path: 'out/ts.txt', old_string: 'two', new_string: 'three' }],
    ['list', {}],
    ['grep', { pattern: 'alpha' }],
    ['session', { command: '/exec' }],
    ['process', { action: 'list' }],
  ]) {
    r = await c.callTool({ name, arguments: args });
    check(!r.isError && r.structuredContent.ok === true && r.structuredContent.message, `${name} allowed`, r.structuredContent);
  }
  r = await c.callTool({ name: 'read', arguments: { path: '/etc/passwd' } });
  check(r.isError && r.structuredContent.error.includes('denied'), 'read outside the workspace is refused', r.structuredContent);

  await refused(c, 'exec', { command: 'true', timeout: -5 }, 'timeout');
  await refused(c, 'exec', { command: '' }, 'command');
  await refused(c, 'exec', { command: 'true', argv: ['true'] }, 'command');
  await refused(c, 'exec', { argv: [''] }, 'argv[0]');
  await refused(c, 'read', { path: 'notes.txt', offset: 0 }, 'offset');
  await refused(c, 'write', { path: 'x' }, 'content');
  await refused(c, 'edit', { path: 'x', old_string: 'a', new_string: 'b', replace_all: 'yes' }, 'replace_all');
  await refused(c, 'list', { path: false }, 'path');
  await refused(c, 'grep', { pattern: 'x', glob: '' }, 'glob');
  await refused(c, 'session', { command: 7 }, 'command');
  await refused(c, 'process', { action: 'write', runId: 'run-1' }, 'input');
}

async function progress(c) {
  const seen = [];
  const started = Date.now();
  const r = await c.callTool(
    { name: 'exec', arguments: { command: 'for i in 1 2 3 4 5; do echo tick $i; sleep 0.3; done' } },
    CallToolResultSchema,
    { onprogress: (p) => seen.push(p) },
  );
  check(r.structuredContent.exitCode === 0, 'the long run finished', r.structuredContent);
  const values = seen.map((p) => p.progress);
  check(seen.length >= 2 && values.every((x, i) => i === 0 || x > values[i - 1]), 'progress notifications, increasing', seen);
  check(seen.some((p) => p.message?.includes('running for') && p.message.includes('tick')), 'progress shows elapsed time and output', seen);
  // At most one per 500 ms, however long the run took on this machine.
  check(seen.length <= (Date.now() - started) / 500 + 1, 'progress is rate-limited', seen);
}

async function cancel(c) {
  const m = `${marker}1`;
  const aborter = new AbortController();
  const call = c.callTool({ name: 'exec', arguments: { command: `sleep ${m}`, timeout: 600 } }, CallToolResultSchema, { signal: aborter.signal }).catch((e) => e);
  await until(() => sleeps(m) >= 1, 'the command to cancel started');
  aborter.abort('the test cancels');
  await call;
  await until(() => sleeps(m) === 0, 'cancel stops the run', 5000);
  ok('cancel stops the run');
}

await versions();
const c = client();
await c.connect(transport());
const { tools } = await c.listTools();
checkSchemas(tools);
await calls(c);
await progress(c);
await cancel(c);
await c.ping();
ok('ping after all that');
const m = `${marker}2`;
c.callTool({ name: 'exec', arguments: { command: `sleep ${m}`, timeout: 600 } }, CallToolResultSchema, { timeout: 600000 }).catch(() => {});
await until(() => sleeps(m) >= 1, 'the held command started');
console.log('holding');
await new Promise(() => {});
