"""What every judge script shares: the checks and their results, and a simulator's JSON-RPC control port."""

import json
import socket

from appstoreserverlibrary.signed_data_verifier import VerificationException, VerificationStatus

APP_APPLE_ID = 1234567890  # what the simulator puts in Production notifications, as Apple puts the app's id
results = []


def check(name, ok, detail=""):
    results.append((name, bool(ok)))
    print(("ok   " if ok else "FAIL ") + name + ("" if ok or not detail else f": {detail}"), flush=True)
    return ok


def attempt(name, body):
    """Runs body(); a raised exception is a failed check with its message."""
    try:
        return body()
    except Exception as error:  # noqa: BLE001 - every failure is reported as a check
        check(name, False, f"{type(error).__name__}: {error}")
        return None


def status_of(call):
    try:
        call()
        return VerificationStatus.OK
    except VerificationException as error:
        return error.status


class Simulator:
    """The simulator's JSON-RPC control port: one JSON object a line."""

    def __init__(self, address):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.file = self.sock.makefile("rwb")
        self.next_id = 0

    def __call__(self, method, **params):
        self.next_id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        self.file.write(line.encode() + b"\n")
        self.file.flush()
        answer = json.loads(self.file.readline())
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]
