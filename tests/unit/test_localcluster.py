import http.server
import threading

from devstack import localcluster


def _serve(bodies: list[bytes]):
    """A web server on a free port answering ``/json/`` with each body in turn, as a
    starting master's UI may: nothing, then half a document, then the whole."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = bodies.pop(0)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_starting_masters_empty_or_partial_answer_is_not_ready(monkeypatch):
    server = _serve([b"", b'{"workers": [', b"[]", b'{"workers": [{"state": "ALIVE"}]}'])
    try:
        # The UI listens one port above the master's.
        monkeypatch.setenv("SHUFFLE_CLUSTER_PORT", str(server.server_address[1] - 1))
        assert localcluster.master_state() is None
        assert localcluster.master_state() is None
        assert localcluster.master_state() is None
        assert localcluster.master_state() == {"workers": [{"state": "ALIVE"}]}
    finally:
        server.shutdown()


def test_no_master_is_not_ready(monkeypatch):
    server = _serve([])
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    monkeypatch.setenv("SHUFFLE_CLUSTER_PORT", str(port - 1))
    assert localcluster.master_state(timeout=0.5) is None
