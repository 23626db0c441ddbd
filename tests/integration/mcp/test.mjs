// `sbxctl mcp` driven by the official MCP TypeScript SDK client, against a
// real sandboxd (jail driver, real silkd) that this script starts on a free
// port with a temp config and data_dir, and tears down at the end.
//
// Env: SBX_BIN_DIR = the build's bin dir (sandboxd, sbxctl, silkd).
// Exit 0 = pass; anything else = fail (never a skip: no root, no sandboxd,
// no SDK are failures).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import Ajv from 'ajv';

const BIN = process.env.SBX_BIN_DIR;
const ROOT = 'root-token-for-mcp-test';
const started = Date.now();

function log(msg) {
  process.stderr.write(`[mcp-test +${((Date.now() - started) / 1000).toFixed(1)}s] ${msg}\n`);
}

// ---- sandboxd ----
const sbxd = { proc: null, port: 0, dir: '', cgroup: '', logFd: -1 };

function writeConfig(withPools) {
  const cfg = {
    listen: '127.0.0.1:0',
    data_dir: path.join(sbxd.dir, 'data'),
    driver: 'jail',
    api_token: ROOT,
    // a cgroup parent of its own: reconcile under a shared parent races
    // with other daemons of a parallel test run
    jail: { cgroup_root: sbxd.cgroup },
  };
  if (withPools) cfg.pools = [{ template: 'host', warm: 1 }];
  fs.writeFileSync(path.join(sbxd.dir, 'config.json'), JSON.stringify(cfg));
}

function startSandboxd() {
  return new Promise((resolve, reject) => {
    const p = spawn(path.join(BIN, 'sandboxd'), ['--config', path.join(sbxd.dir, 'config.json')], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, SANDBOXD_LOG_LEVEL: process.env.SANDBOXD_LOG_LEVEL || 'info' },
    });
    sbxd.proc = p;
    let seen = '';
    let ready = false; // this daemon's, not a previous one's late output
    const timer = setTimeout(() => reject(new Error(`sandboxd did not start in 60 s:\n${seen}`)), 60000);
    p.stderr.on('data', (d) => {
      fs.writeSync(sbxd.logFd, d);
      if (ready) return;
      seen += d.toString();
      const m = seen.match(/sandboxd: ready port=(\d+)/);
      if (m) {
        ready = true;
        sbxd.port = Number(m[1]);
        clearTimeout(timer);
        resolve();
      }
    });
    p.on('exit', (code, sig) => {
      if (!ready) {
        clearTimeout(timer);
        reject(new Error(`sandboxd exited (${code ?? sig}) before ready:\n${seen}`));
      }
    });
  });
}

function stopSandboxd() {
  const p = sbxd.proc;
  sbxd.proc = null;
  sbxd.port = 0;
  if (!p || p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    p.on('exit', () => resolve());
    p.kill('SIGTERM');
  });
}

// sandboxd leaves sandboxes running when it stops, so cleanup is a restart
// that owns nothing (no journalled claims, no pools): its reconcile
// destroys every jail under the data_dir. Then the temp dir and cgroups go.
async function cleanupSandboxd() {
  await stopSandboxd();
  if (!sbxd.dir) return;
  try {
    fs.rmSync(path.join(sbxd.dir, 'data', 'claims.json'), { force: true });
    fs.writeFileSync(path.join(sbxd.dir, 'data', 'pools.json'), '{"pools":[]}');
    writeConfig(false);
    await startSandboxd();
    await stopSandboxd();
  } catch (e) {
    log(`cleanup restart: ${e.message}`);
    log(`sandboxd log tail:\n${fs.readFileSync(path.join(sbxd.dir, 'daemon.log'), 'utf8').slice(-3000)}`);
    await stopSandboxd();
  }
  fs.rmSync(sbxd.dir, { recursive: true, force: true });
  for (const ctl of ['cpu', 'cpuacct', 'cpuset', 'memory', 'pids', 'freezer', 'blkio', 'devices', 'systemd', 'unified', '']) {
    try {
      fs.rmdirSync(path.join('/sys/fs/cgroup', ctl, sbxd.cgroup));
    } catch {
      /* absent on this hierarchy */
    }
  }
}

async function api(method, p) {
  const r = await fetch(`http://127.0.0.1:${sbxd.port}${p}`, { method, headers: { Authorization: `Bearer ${ROOT}` } });
  const body = await r.text();
  assert.equal(r.status, 200, `${method} ${p}: ${r.status} ${body}`);
  return JSON.parse(body);
}

async function liveIds() {
  const j = await api('GET', '/v1/sandboxes');
  return new Set(j.sandboxes.map((s) => s.id));
}

function serverEnv(extra = {}) {
  const env = { ...process.env, SANDBOXD_ADDR: `127.0.0.1:${sbxd.port}`, SANDBOXD_TOKEN: ROOT, ...extra };
  delete env.SANDBOXD_TEMPLATE;
  return env;
}

// ---- a raw line-level client, for what the SDK would never send ----
class RawServer {
  constructor(args = ['mcp'], env = serverEnv()) {
    this.proc = spawn(path.join(BIN, 'sbxctl'), args, { stdio: ['pipe', 'pipe', 'pipe'], env });
    this.lines = [];
    this.waiters = [];
    this.stderr = '';
    this.proc.stderr.on('data', (d) => (this.stderr += d.toString()));
    readline.createInterface({ input: this.proc.stdout }).on('line', (l) => {
      this.lines.push(l);
      this.waiters.splice(0).forEach((w) => w());
    });
    this.exited = new Promise((resolve) => this.proc.on('exit', (code, sig) => resolve({ code, sig })));
  }
  send(text) {
    this.proc.stdin.write(text + '\n');
  }
  // the next line on stdout, parsed; it must be JSON
  async next(ms = 60000) {
    const deadline = Date.now() + ms;
    while (this.lines.length === 0) {
      if (Date.now() > deadline) throw new Error(`no answer in ${ms} ms; stderr:\n${this.stderr}`);
      await new Promise((r) => {
        this.waiters.push(r);
        setTimeout(r, 200);
      });
    }
    const l = this.lines.shift();
    try {
      return JSON.parse(l);
    } catch {
      throw new Error(`stdout carried a non-JSON line: ${l}`);
    }
  }
  async request(id, method, params) {
    this.send(JSON.stringify({ jsonrpc: '2.0', id, method, ...(params ? { params } : {}) }));
    const r = await this.next();
    assert.equal(r.id, id, JSON.stringify(r));
    return r;
  }
}

// ---- the tests ----
async function sdkSession() {
  const transport = new StdioClientTransport({
    command: path.join(BIN, 'sbxctl'),
    args: ['mcp'],
    env: serverEnv(),
    stderr: 'pipe',
  });
  let serverLog = '';
  transport.stderr?.on('data', (d) => (serverLog += d.toString()));
  const client = new Client({ name: 'sbx-mcp-test', version: '1.0.0' });
  try {
    await client.connect(transport);
    const ver = client.getServerVersion();
    assert.equal(ver.name, 'sbxctl');
    log(`initialized: ${JSON.stringify(ver)}`);

    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name).sort();
    for (const want of ['create_sandbox', 'exec', 'spawn', 'ps', 'logs', 'kill', 'write_file', 'read_file', 'list_dir',
      'release', 'node_info', 'fork', 'hibernate', 'checkpoint', 'branch_checkpoint', 'list_checkpoints',
      'delete_checkpoint', 'promote', 'wake', 'git_status', 'git_diff', 'git_commit'])
      assert.ok(names.includes(want), `tools/list lacks ${want}`);
    const ajv = new Ajv({ strict: true, allErrors: true });
    for (const t of tools) {
      assert.equal(t.inputSchema.type, 'object', `${t.name}: inputSchema.type`);
      ajv.compile(t.inputSchema); // throws on an invalid schema
      assert.ok(t.description && !t.description.includes('\n'), `${t.name}: one-line description`);
      assert.equal(typeof t.annotations?.readOnlyHint, 'boolean', `${t.name}: readOnlyHint`);
      assert.equal(typeof t.annotations?.destructiveHint, 'boolean', `${t.name}: destructiveHint`);
      // MCP 2025-06-18: every tool declares the shape of its structuredContent
      assert.equal(t.outputSchema?.type, 'object', `${t.name}: outputSchema.type`);
      ajv.compile(t.outputSchema);
    }
    const outCheck = Object.fromEntries(tools.map((t) => [t.name, ajv.compile(t.outputSchema)]));
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    for (const ro of ['read_file', 'list_dir', 'ps', 'logs', 'node_info', 'search']) assert.equal(byName[ro].annotations.readOnlyHint, true, ro);
    assert.equal(byName.replace.annotations.readOnlyHint, false, 'replace');
    for (const d of ['exec', 'write_file', 'release', 'kill']) {
      assert.equal(byName[d].annotations.readOnlyHint, false, d);
      assert.equal(byName[d].annotations.destructiveHint, true, d);
    }
    for (const ro of ['git_status', 'git_diff']) assert.equal(byName[ro].annotations.readOnlyHint, true, ro);
    assert.equal(byName.git_commit.annotations.readOnlyHint, false, 'git_commit changes the repository');
    log(`tools/list: ${tools.length} tools, schemas compile`);

    const call = async (name, args) => client.callTool({ name, arguments: args });
    const ok = (r, what) => {
      assert.ok(!r.isError, `${what}: ${JSON.stringify(r.content)}`);
      assert.equal(r.content[0].type, 'text');
      assert.deepEqual(JSON.parse(r.content[0].text), r.structuredContent);
      return r.structuredContent;
    };

    const created = ok(await call('create_sandbox', { ttl_seconds: 0 }), 'create_sandbox');
    const id = created.sandbox_id;
    assert.ok(id && created.deadline, JSON.stringify(created));
    assert.ok((await liveIds()).has(id), 'sandboxd lists the new sandbox');
    log(`created ${id} deadline ${created.deadline}`);

    let r = ok(await call('exec', { sandbox_id: id, command: 'echo hi' }), 'exec echo');
    assert.equal(r.exit_code, 0);
    assert.equal(r.stdout, 'hi\n');
    assert.equal(r.truncated, false);

    r = ok(await call('exec', { sandbox_id: id, command: 'echo oops >&2; exit 3' }), 'exec failing');
    assert.equal(r.exit_code, 3);
    assert.equal(r.stderr, 'oops\n');

    r = ok(await call('exec', { sandbox_id: id, command: 'head -c 1100000 /dev/zero | tr "\\0" a' }), 'exec big');
    assert.equal(r.stdout.length, 1 << 20);
    assert.equal(r.truncated, true);
    assert.equal(r.exit_code, 0);

    r = ok(await call('exec', { sandbox_id: id, command: 'mkdir -p /tmp/mcp && pwd', cwd: '/tmp' }), 'exec cwd');
    assert.equal(r.stdout, '/tmp\n');
    assert.ok(outCheck.exec(r), JSON.stringify(outCheck.exec.errors));

    // env, stdin and timeout_seconds
    r = ok(await call('exec', { sandbox_id: id, command: 'echo "$GREETING"; tr a-z A-Z', env: { GREETING: 'hello there' }, stdin: 'from stdin\n' }), 'exec env stdin');
    assert.equal(r.stdout, 'hello there\nFROM STDIN\n');
    assert.equal(r.timed_out, false);
    r = ok(await call('exec', { sandbox_id: id, command: 'echo started; exec sleep 60', timeout_seconds: 1 }), 'exec timeout');
    assert.equal(r.timed_out, true, JSON.stringify(r));
    assert.equal(r.stdout, 'started\n');
    assert.notEqual(r.exit_code, 0);
    r = await call('exec', { sandbox_id: id, command: 'true', env: { 'A=B': 'x' } });
    assert.equal(r.isError, true, 'an env name with = is refused');

    const content = 'hello from mcp\nline two: ünïcødé\n';
    r = await call('write_file', { sandbox_id: id, path: 'tmp/rel.txt', content });
    assert.equal(r.isError, true, 'a relative path is refused');
    assert.match(r.content[0].text, /absolute path/);
    log(`relative path -> ${r.content[0].text}`);
    r = ok(await call('write_file', { sandbox_id: id, path: '/tmp/mcp/a.txt', content }), 'write_file');
    assert.equal(r.bytes, Buffer.byteLength(content));
    r = ok(await call('read_file', { sandbox_id: id, path: '/tmp/mcp/a.txt' }), 'read_file');
    assert.equal(r.content, content);

    r = ok(await call('list_dir', { sandbox_id: id, path: '/tmp/mcp' }), 'list_dir');
    const ent = r.entries.find((e) => e.name === 'a.txt');
    assert.ok(ent, JSON.stringify(r));
    assert.equal(ent.type, 'file');
    assert.equal(ent.size, Buffer.byteLength(content));

    // search and replace through the jail's silkd
    r = ok(await call('search', { sandbox_id: id, path: '/tmp/mcp', pattern: '\\w+: ü' }), 'search');
    assert.deepEqual(r.matches, [{ file: '/tmp/mcp/a.txt', line: 2, content: 'line two: ünïcødé' }]);
    r = await call('search', { sandbox_id: id, path: '/tmp/mcp', pattern: 'two(' });
    assert.equal(r.isError, true, 'a rejected pattern is a tool error');
    assert.match(r.content[0].text, /missing closing parenthesis/);
    r = ok(await call('replace', { sandbox_id: id, files: ['/tmp/mcp/a.txt'], pattern: '(?m)^line (\\w+)', replacement: 'row ${1}' }), 'replace');
    assert.deepEqual(r, { files: [{ file: '/tmp/mcp/a.txt', replacements: 1 }], total: 1 });
    r = ok(await call('read_file', { sandbox_id: id, path: '/tmp/mcp/a.txt' }), 'read_file after replace');
    assert.equal(r.content, 'hello from mcp\nrow two: ünïcødé\n');
    r = ok(await call('replace', { sandbox_id: id, files: ['/tmp/mcp/a.txt'], pattern: 'row', replacement: 'line' }), 'replace back');
    log('search and replace: ok');

    r = await call('read_file', { sandbox_id: id, path: '/tmp/mcp' });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /not a regular file/);
    r = await call('read_file', { sandbox_id: id, path: '/tmp/mcp/missing' });
    assert.equal(r.isError, true);

    const sp = ok(await call('spawn', { sandbox_id: id, command: 'echo bg; sleep 30' }), 'spawn');
    assert.ok(sp.pid > 0);
    const ps = ok(await call('ps', { sandbox_id: id }), 'ps');
    assert.ok(ps.processes.some((p) => p.pid === sp.pid && p.state === 'running'), JSON.stringify(ps));
    // kill only once the shell has printed: a kill that wins the race
    // against `echo` under load would leave nothing to replay
    let lg;
    for (let i = 0; i < 100; i++) {
      lg = ok(await call('logs', { sandbox_id: id, pid: sp.pid }), 'logs');
      if (lg.stdout !== '') break;
      await new Promise((res) => setTimeout(res, 100));
    }
    assert.equal(lg.stdout, 'bg\n');
    assert.equal(lg.exited, false);
    const k1 = ok(await call('kill', { sandbox_id: id, pid: sp.pid }), 'kill');
    assert.equal(k1.sent, true);
    assert.ok(outCheck.kill(k1), JSON.stringify(outCheck.kill.errors));
    for (let i = 0; i < 50; i++) {
      lg = ok(await call('logs', { sandbox_id: id, pid: sp.pid }), 'logs');
      if (lg.exited) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    assert.equal(lg.stdout, 'bg\n');
    assert.equal(lg.exited, true);
    assert.equal(lg.exit_code, 137);
    // a dead pid: nothing is sent, and the answer says so
    const k2 = ok(await call('kill', { sandbox_id: id, pid: sp.pid }), 'kill of an exited pid');
    assert.equal(k2.sent, false, JSON.stringify(k2));
    assert.equal(k2.reason, 'the process has already exited');
    const k3 = ok(await call('kill', { sandbox_id: id, pid: 999999 }), 'kill of an unknown pid');
    assert.equal(k3.sent, false);
    assert.equal(k3.reason, 'no such pid');

    // git tools on the host template's git, in the jail
    ok(await call('exec', { sandbox_id: id, command: 'mkdir -p /tmp/g && cd /tmp/g && git init -q -b main && echo one > a.txt' }), 'git init');
    r = ok(await call('git_status', { sandbox_id: id, path: '/tmp/g' }), 'git_status');
    assert.equal(r.branch, 'main');
    assert.deepEqual(r.files, [{ path: 'a.txt', staged: '?', unstaged: '?' }]);
    r = ok(await call('git_commit', { sandbox_id: id, path: '/tmp/g', message: 'first', files: ['a.txt'], author: 'Ann <ann@example.org>' }), 'git_commit');
    assert.match(r.hash, /^[0-9a-f]{40}$/);
    ok(await call('exec', { sandbox_id: id, command: 'echo two >> /tmp/g/a.txt' }), 'edit');
    r = ok(await call('git_diff', { sandbox_id: id, path: '/tmp/g' }), 'git_diff');
    assert.match(r.diff, /^\+two$/m);
    r = ok(await call('git_diff', { sandbox_id: id, path: '/tmp/g', staged: true }), 'git_diff staged');
    assert.equal(r.diff, '');
    r = ok(await call('git_commit', { sandbox_id: id, path: '/tmp/g', message: 'second', all: true }), 'git_commit all');
    r = ok(await call('git_status', { sandbox_id: id, path: '/tmp/g' }), 'git_status clean');
    assert.deepEqual(r.files, []);
    r = await call('git_status', { sandbox_id: id, path: '/tmp' });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /not a git repository/);

    const info = ok(await call('node_info', {}), 'node_info');
    assert.ok(Array.isArray(info.pools), JSON.stringify(info));

    // failures are tool results with isError, never protocol errors
    r = await call('exec', { sandbox_id: 'no-such-sandbox', command: 'true' });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /no-such-sandbox/);
    log(`bad id -> ${r.content[0].text}`);
    r = await call('exec', { sandbox_id: id });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /command/);
    r = await call('checkpoint', { sandbox_id: id });
    assert.notEqual(r.isError, true, r.content[0].text);
    assert.match(r.content[0].text, /checkpoint_id/);
    r = await call('hibernate', { sandbox_id: id });
    assert.notEqual(r.isError, true, r.content[0].text);
    log(`hibernate -> ${r.content[0].text}`);
    ok(await call('exec', { sandbox_id: id, command: 'true' }), 'exec wakes a hibernated sandbox');
    await assert.rejects(call('no_such_tool', {}), (e) => e.code === -32602);

    ok(await call('release', { sandbox_id: id }), 'release');
    assert.ok(!(await liveIds()).has(id), 'released sandbox gone from sandboxd');
    r = await call('exec', { sandbox_id: id, command: 'true' });
    assert.equal(r.isError, true);
    log('SDK session: all tool checks passed');
  } catch (e) {
    log(`server stderr:\n${serverLog}`);
    throw e;
  } finally {
    await client.close();
  }
}

// Two sandboxes, then stdin closes (or a signal comes): both released.
async function releaseOnExit(how) {
  const s = new RawServer();
  const init = await s.request(1, 'initialize', { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'raw', version: '0' } });
  assert.equal(init.result.protocolVersion, '2025-03-26');
  s.send('{"jsonrpc":"2.0","method":"notifications/initialized"}');
  const ids = [];
  for (const n of [2, 3]) {
    const r = await s.request(n, 'tools/call', { name: 'create_sandbox', arguments: {} });
    assert.ok(!r.result.isError, JSON.stringify(r));
    ids.push(r.result.structuredContent.sandbox_id);
  }
  const live = await liveIds();
  for (const id of ids) assert.ok(live.has(id), `${id} live before exit`);
  if (how === 'eof') s.proc.stdin.end();
  else s.proc.kill(how);
  const { code, sig } = await s.exited;
  assert.equal(code, 0, `exit after ${how}: code ${code} signal ${sig}; stderr:\n${s.stderr}`);
  const after = await liveIds();
  for (const id of ids) assert.ok(!after.has(id), `${id} still live after ${how}; stderr:\n${s.stderr}`);
  log(`${how}: both sandboxes released (${ids.join(', ')})`);
}

// The per-call cap (shortened through the test-only env), and calls run
// concurrently: a ping is answered while an exec blocks.
async function callCap() {
  // the flags instead of the env this time
  const env = serverEnv({ SBXCTL_MCP_CALL_CAP_MS: '2000' });
  delete env.SANDBOXD_ADDR;
  delete env.SANDBOXD_TOKEN;
  const s = new RawServer(['mcp', '--addr', `127.0.0.1:${sbxd.port}`, '--token', ROOT], env);
  await s.request(1, 'initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '0' } });
  const c = await s.request(2, 'tools/call', { name: 'create_sandbox', arguments: {} });
  const id = c.result.structuredContent.sandbox_id;
  const t0 = Date.now();
  s.send(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'exec', arguments: { sandbox_id: id, command: 'sleep 300 & sleep 300' } } }));
  await new Promise((r) => setTimeout(r, 300));
  s.send('{"jsonrpc":"2.0","id":4,"method":"ping"}');
  let r = await s.next();
  assert.equal(r.id, 4, 'ping answered while the exec runs');
  r = await s.next();
  assert.equal(r.id, 3);
  assert.equal(r.result.isError, true, JSON.stringify(r));
  assert.match(r.result.content[0].text, /timed out/);
  const took = Date.now() - t0;
  assert.ok(took >= 1900 && took < 10000, `cap after ${took} ms`);
  let sleeping = true;
  for (let i = 0; i < 50 && sleeping; i++) {
    const ps = await s.request(5 + i, 'tools/call', { name: 'ps', arguments: { sandbox_id: id } });
    sleeping = ps.result.structuredContent.processes.some((p) => p.argv.includes('sleep 300 & sleep 300') && p.state === 'running');
    if (sleeping) await new Promise((res) => setTimeout(res, 100));
  }
  assert.equal(sleeping, false, 'the exec past its cap was killed');
  // and so was the sleep its shell put in the background: no `sleep 300`
  // left in the sandbox's pid namespace
  const left = `for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done | grep -c '^sleep 300 $'`;
  let n = -1;
  for (let i = 0; i < 50 && n !== 0; i++) {
    const e = await s.request(100 + i, 'tools/call', { name: 'exec', arguments: { sandbox_id: id, command: left } });
    n = Number(e.result.structuredContent.stdout.trim());
    if (n !== 0) await new Promise((res) => setTimeout(res, 100));
  }
  assert.equal(n, 0, 'no sleep 300 of the killed exec survives');
  s.proc.stdin.end();
  const { code } = await s.exited;
  assert.equal(code, 0, s.stderr);
  assert.ok(!(await liveIds()).has(id));
  log(`call cap: exec answered a timeout after ${took} ms and its whole tree was killed; ping ran alongside`);
}

async function malformed() {
  const s = new RawServer();
  const expectError = async (line, code, idWant = null) => {
    s.send(line);
    const r = await s.next();
    assert.equal(r.jsonrpc, '2.0');
    assert.equal(r.id, idWant, `${line} -> ${JSON.stringify(r)}`);
    assert.equal(r.error?.code, code, `${line} -> ${JSON.stringify(r)}`);
    assert.equal(typeof r.error.message, 'string');
  };
  await expectError('{"jsonrpc":"2.0","id":1,"method":', -32700);
  await expectError('not json at all', -32700);
  await expectError('[{"jsonrpc":"2.0","id":1,"method":"ping"}]', -32600);
  await expectError('42', -32600);
  await expectError('{"jsonrpc":"1.0","id":7,"method":"ping"}', -32600, 7);
  await expectError('{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}', -32600);
  await expectError('{"jsonrpc":"2.0","id":8,"method":5}', -32600, 8);
  await expectError('{"jsonrpc":"2.0","id":9,"method":"no/such/method"}', -32601, 9);
  await expectError('{"jsonrpc":"2.0","id":10,"method":"initialize","params":{}}', -32602, 10);
  await expectError('{"jsonrpc":"2.0","id":11,"method":"tools/call","params":[1]}', -32602, 11);
  await expectError('{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"arguments":{}}}', -32602, 12);
  await expectError('{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"nope"}}', -32602, 's');
  // valid JSON that jansson alone would refuse still gets its own id back
  await expectError('{"jsonrpc":"2.0","id":20,"method":"ping","params":{"s":"a\\u0000b"}}', -32602, 20);
  await expectError('{"jsonrpc":"2.0","id":21,"method":"ping","params":{"n":9223372036854775808}}', -32602, 21);
  await expectError('{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"exec","arguments":{"sandbox_id":"x","command":"echo \\u0000"}}}', -32602, 22);
  // notifications (known or not) get no answer: the next answer is ping's
  s.send('{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}');
  s.send('{"jsonrpc":"2.0","method":"some/unknown/notification"}');
  s.send('');
  let r = await s.request(13, 'ping');
  assert.deepEqual(r.result, {});
  // an over-long line: a clean error, and the server keeps serving
  s.send('{"jsonrpc":"2.0","id":14,"method":"ping","params":{"pad":"' + 'x'.repeat(9 << 20) + '"}}');
  r = await s.next();
  assert.equal(r.error?.code, -32600, JSON.stringify(r).slice(0, 300));
  assert.match(r.error.message, /longer than/);
  r = await s.request(15, 'initialize', { protocolVersion: '1999-01-01', capabilities: {}, clientInfo: { name: 'raw', version: '0' } });
  assert.equal(r.result.protocolVersion, '2025-06-18');
  // an older client we speak is answered with its own version
  r = await s.request(16, 'initialize', { protocolVersion: '2024-11-05', capabilities: {}, clientInfo: { name: 'raw', version: '0' } });
  assert.equal(r.result.protocolVersion, '2024-11-05');
  s.proc.stdin.end();
  const { code } = await s.exited;
  assert.equal(code, 0, s.stderr);
  assert.equal(s.lines.length, 0, `unexpected output: ${s.lines}`);
  log('malformed input: all error responses as expected');
}

async function main() {
  assert.ok(BIN, 'SBX_BIN_DIR must name the build bin dir');
  for (const b of ['sandboxd', 'sbxctl']) assert.ok(fs.existsSync(path.join(BIN, b)), `${b} not built in ${BIN}`);
  assert.equal(process.getuid(), 0, 'the jail driver needs root');
  sbxd.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbxd-mcp-'));
  sbxd.cgroup = `sbxd-mcp-${process.pid}-${path.basename(sbxd.dir).slice(-6)}`;
  sbxd.logFd = fs.openSync(path.join(sbxd.dir, 'daemon.log'), 'a');
  let failed = null;
  try {
    writeConfig(true);
    await startSandboxd();
    log(`sandboxd on port ${sbxd.port}`);
    await malformed();
    await sdkSession();
    await callCap();
    await releaseOnExit('eof');
    await releaseOnExit('SIGTERM');
    await releaseOnExit('SIGINT');
  } catch (e) {
    failed = e;
  }
  if (failed) {
    try {
      log(`sandboxd log tail:\n${fs.readFileSync(path.join(sbxd.dir, 'daemon.log'), 'utf8').slice(-4000)}`);
    } catch {
      /* no log */
    }
  }
  await cleanupSandboxd();
  if (failed) {
    console.error(failed);
    process.exit(1);
  }
  log('PASS');
  process.exit(0); // fetch keeps idle sockets that would hold the loop open
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
