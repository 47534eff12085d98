"""A stand-in for sFlow-RT's REST API (sFlow-RT itself cannot be installed here).

Answers with JSON of the shapes a real sFlow-RT gave against this Open vSwitch
(see DESIGN.md), as either API generation: ``version`` = "1.60" answers the
utilisation table with 404 and has ``/dump/ALL/ifoutoctets/json`` (a flat
list), "3" has ``/table/ALL/ifoutoctets/json`` (rows of entries). It can
be told to fail: ``mode`` = ok | 500 | badjson, or only the utilisation
request: ``util_mode`` = ok | 500.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StandIn:
    def __init__(self):
        self.mode = "ok"
        self.util_mode = "ok"
        self.version = "1.60"
        self.flows = []  # activeflows entries
        self.util = []  # utilisation entries (served flat by /dump, one per row by /table)
        self.gets = []  # paths asked for
        self.puts = {}
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, body):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self):
                n = int(self.headers.get("Content-Length", 0))
                outer.puts[self.path] = json.loads(self.rfile.read(n))
                self.send_response(204)
                self.end_headers()

            def do_GET(self):
                outer.gets.append(self.path)
                if outer.mode == "500":
                    return self._send(500, {"error": "boom"})
                if outer.mode == "badjson":
                    return self._send(200, b"{not json")
                if self.path.startswith("/activeflows/ALL/"):
                    return self._send(200, outer.flows)
                util = self.path.startswith("/table/ALL/") and outer.version != "1.60" or \
                    self.path.startswith("/dump/ALL/")
                if util and outer.util_mode == "500":
                    return self._send(500, {"error": "boom"})
                if util and self.path.startswith("/table/"):
                    return self._send(200, [[u] for u in outer.util])
                if util:
                    return self._send(200, outer.util)
                self._send(404, {})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
