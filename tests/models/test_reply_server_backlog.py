"""The local model servers take hundreds of connections at once: ``bench.model_bound --openai``
opens one per worker thread's client, all together, and socketserver's default listen backlog
of 5 dropped most of them (the 1,000-run benchmark ended in ``ReadError``s)."""

from __future__ import annotations

import socket
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler

from agentloop.orchestration.testing.servers.scripted_server import OwnedHTTPServer

CLIENTS = 300


def test_three_hundred_clients_connect_before_the_server_accepts_any() -> None:
    # bound and listening, never serving: every connection has to wait in the listen queue
    server = OwnedHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    try:
        with ExitStack() as stack:
            for _ in range(CLIENTS):  # a dropped handshake would block here until the timeout
                client = socket.create_connection(server.server_address[:2], timeout=2)
                stack.callback(client.close)
    finally:
        server.server_close()
