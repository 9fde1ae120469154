"""Client for glovebox's tool socket: call the host's tools from a box.

    from glovebox_tools import orders          # any tool, by name
    print(orders(42, status="open"))
    import glovebox_tools; glovebox_tools.call("orders", 42)

A tool's error raises ToolError (its .klass is the host's class name,
e.g. "UnknownToolError"); a spent budget or deadline raises ToolAbort.
The socket path is in GLOVEBOX_TOOLS. Wire format: frames of a decimal
length, a newline and that many bytes; see glovebox's box package docs.
"""
import json
import math
import os
import socket
import threading

__all__ = ["call", "tools", "ToolError", "ToolAbort"]


class ToolError(Exception):
    def __init__(self, klass, message):
        super().__init__(message)
        self.klass = klass


class ToolAbort(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


_lock = threading.Lock()
_sock = None
_file = None


def _conn():
    global _sock, _file
    if _sock is None:
        path = os.environ.get("GLOVEBOX_TOOLS")
        if not path:
            raise ToolError("ToolError", "no tool socket (GLOVEBOX_TOOLS is not set)")
        _sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        _sock.connect(path)
        _file = _sock.makefile("rb")
    return _sock, _file


def _roundtrip(body):
    with _lock:
        s, f = _conn()
        s.sendall(str(len(body)).encode() + b"\n" + body)
        n = int(f.readline())
        return f.read(n)




def _decode(reply):
    tag, _, rest = reply.partition(b"\n")
    if tag == b"n":
        return None
    if tag == b"t":
        return True
    if tag == b"f":
        return False
    if tag == b"s":
        return rest.decode("utf-8")
    if tag == b"i":
        return int(rest)
    if tag == b"j":
        return json.loads(rest.decode("utf-8"))
    if tag == b"err":
        klass, _, msg = rest.partition(b"\n")
        raise ToolError(klass.decode(), msg.decode("utf-8", "replace"))
    if tag == b"abort":
        status, _, msg = rest.partition(b"\n")
        raise ToolAbort(status.decode(), msg.decode("utf-8", "replace"))
    raise ToolError("ToolError", "malformed reply from the tool socket")


def call(name, *args, **kwargs):
    """Call tool name with positional and keyword arguments."""
    body = b"call\n" + name.encode() + b"\n"
    if args or kwargs:
        body += json.dumps([list(args), kwargs], separators=(",", ":")).encode()
    return _decode(_roundtrip(body))


def tools():
    """The names of the tools the host offers."""
    return _decode(_roundtrip(b"list"))


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return lambda *a, **k: call(name, *a, **k)
