#!/usr/bin/env python3
"""Records what an SDK sends, for Tests/Fixtures: an HTTP server on 127.0.0.1 that writes one JSON
line per request (method, path, query, headers, body) to a file and answers as Datong does (200 `{}`,
or a 1x1 GIF for .gif paths), so the SDK behaves as it would against a real server.

    python3 Tests/Fixtures/capture.py --port 8106 --out /tmp/capture.jsonl
    # point the SDK at http://127.0.0.1:8106/sa?project=default, run it, stop with Ctrl-C
"""
import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

GIF = bytes.fromhex("47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b")
lock = threading.Lock()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8106)
    parser.add_argument("--out", required=True, help="JSON lines file to append to")
    parser.add_argument("--max-body", type=int, default=16 << 20)
    args = parser.parse_args()

    class Handler(BaseHTTPRequestHandler):
        def handle_any(self):
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            if length > args.max_body:
                self.send_error(413)
                return
            body = self.rfile.read(length).decode("utf-8", "replace") if length else None
            record = {"method": self.command, "path": url.path, "query": url.query,
                      "headers": dict(self.headers.items()), "body": body}
            with lock, open(args.out, "a", encoding="utf-8") as out:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            gif = url.path.endswith(".gif")
            answer = GIF if gif else b"{}"
            self.send_response(200)
            self.send_header("Content-Type", "image/gif" if gif else "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_GET = do_POST = handle_any

        def log_message(self, format, *values):
            print("captured", self.command, self.path[:120], flush=True)

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"capturing on http://127.0.0.1:{args.port}/ into {args.out}; Ctrl-C stops", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
