#!/usr/bin/env python3
"""The Standard Webhooks reference library (`standardwebhooks`, PyPI) judging the suite's webhooks.

A receiver on 127.0.0.1 that verifies every delivery the way a customer's backend would: `Webhook(secret).verify`
with the headers and the raw body, for each secret it has been given (as a receiver configures the old and the new
secret during a rotation). It also checks that the same delivery with one byte of its body changed verifies under
none of them. The test drives it over HTTP:

    python standard_webhooks_judge.py --port 7190
    POST /secrets   {"label": "whsec_...", ...}    the secrets it knows from now on
    POST /hooks     a delivery (answered 204 when some secret verifies it, 401 when none does)
    GET  /results   [{"id", "eventId", "verifiedBy": [labels], "tamperedVerifies": bool}]
    POST /quit
"""
import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

lock = threading.Lock()
secrets = {}
results = []


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body=b""):
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/results":
            with lock:
                self.answer(200, json.dumps(results).encode())
        else:
            self.answer(404)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path == "/secrets":
            with lock:
                secrets.clear()
                secrets.update(json.loads(body))
            self.answer(204)
        elif self.path == "/hooks":
            headers = {k: v for k, v in self.headers.items()}
            with lock:
                known = dict(secrets)
            verified_by, tampered = [], False
            event_id = None
            for label, secret in known.items():
                try:
                    event = Webhook(secret).verify(body, headers)
                    verified_by.append(label)
                    event_id = event.get("id")
                except WebhookVerificationError:
                    pass
                try:
                    Webhook(secret).verify(body[:-1] + b" ", headers, json_parse=False)
                    tampered = True
                except WebhookVerificationError:
                    pass
            with lock:
                results.append({"id": headers.get("webhook-id"), "eventId": event_id, "verifiedBy": sorted(verified_by),
                                "tamperedVerifies": tampered})
            self.answer(204 if verified_by else 401)
        elif self.path == "/quit":
            self.answer(204)
            threading.Thread(target=self.server.shutdown).start()
        else:
            self.answer(404)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"standard-webhooks-judge: listening on {args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
