"""A stand-in for sFlow-RT's REST API (sFlow-RT itself cannot be installed here).

Answers with JSON of the shapes a real sFlow-RT 1.60 gave against this Open
vSwitch (see DESIGN.md), and can be told to fail: ``mode`` = ok | 500 | badjson.
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StandIn:
    def __init__(self):
        self.mode = "ok"
        self.flows = []  # activeflows entries
        self.util = []  # table rows
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
                if outer.mode == "500":
                    return self._send(500, {"error": "boom"})
                if outer.mode == "badjson":
                    return self._send(200, b"{not json")
                if self.path.startswith("/activeflows/ALL/"):
                    return self._send(200, outer.flows)
                if self.path.startswith("/table/ALL/"):
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
