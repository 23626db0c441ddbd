#!/usr/bin/env python3
"""An editor's side of LSP over a language-server command (argv), as
template_debian runs it: `sbxctl lsp ID python --root DIR`. Opens FILE
(whose text is given), asks for a hover and a definition at the call of
`twice`, then shuts the server down. Exit 0 when both answers name it."""
import json
import subprocess
import sys

uri, text = sys.argv[1], sys.argv[2]
cmd = sys.argv[3:]
p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def send(msg):
    body = json.dumps(msg).encode()
    p.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    p.stdin.flush()


def wait(want_id):
    while True:
        length = None
        while True:
            line = p.stdout.readline()
            if not line:
                sys.exit("lsp_client: the server's stream ended before the answer to %d" % want_id)
            line = line.strip()
            if not line:
                break
            k, _, v = line.decode().partition(":")
            if k.lower() == "content-length":
                length = int(v)
        msg = json.loads(p.stdout.read(length))
        if msg.get("id") == want_id and "method" not in msg:
            if "error" in msg:
                sys.exit("lsp_client: error answer: %s" % msg["error"])
            return msg["result"]


root = uri.rsplit("/", 1)[0]
send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
      "params": {"processId": None, "rootUri": root, "capabilities": {}}})
caps = wait(1)["capabilities"]
assert "hoverProvider" in caps, caps
send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
send({"jsonrpc": "2.0", "method": "textDocument/didOpen",
      "params": {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}})
lines = text.split("\n")
line = next(i for i, l in enumerate(lines) if "twice(21)" in l)
pos = {"line": line, "character": lines[line].index("twice(21)") + 1}
doc = {"uri": uri}
send({"jsonrpc": "2.0", "id": 2, "method": "textDocument/hover", "params": {"textDocument": doc, "position": pos}})
hover = json.dumps(wait(2))
assert "twice" in hover and "Double x" in hover, hover
send({"jsonrpc": "2.0", "id": 3, "method": "textDocument/definition",
      "params": {"textDocument": doc, "position": pos}})
defs = wait(3)
assert defs and defs[0]["uri"] == uri and defs[0]["range"]["start"]["line"] == 0, defs
send({"jsonrpc": "2.0", "id": 4, "method": "shutdown"})
wait(4)
send({"jsonrpc": "2.0", "method": "exit"})
p.stdin.close()
rest = p.stdout.read()
rc = p.wait()
if rc != 0:
    sys.exit("lsp_client: the bridge exited %d" % rc)
print("lsp_client: hover and definition ok")
