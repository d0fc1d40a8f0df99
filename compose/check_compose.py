#!/usr/bin/env python3
"""Checks compose/compose.yaml and compose/compose.dev.yaml: each valid against the Compose
Specification's JSON Schema; the two together in agreement with compose/up.sh (the same services,
executables, ports and flags) and compose/.env (every port defined there, with the Swift code's default ports);
and compose.yaml alone a production deployment: no simulator, no simulator roots trusted, no
development flags, bundle ids required.

    python3 compose/check_compose.py Tests/Schemas/compose-spec.json [SERVICE=PORT ...]

Exit 0 when everything agrees; otherwise one line per problem and exit 1. Needs PyYAML and jsonschema.
"""
import json
import re
import shlex
import sys
from pathlib import Path

import jsonschema
import yaml

from compose_services import merged

root = Path(__file__).resolve().parent
problems = []

schema = json.load(open(sys.argv[1]))
production = yaml.safe_load((root / "compose.yaml").read_text())
dev = yaml.safe_load((root / "compose.dev.yaml").read_text())
for label, document in (("compose.yaml", production), ("compose.dev.yaml", dev)):
    for error in jsonschema.Draft7Validator(schema).iter_errors(document):
        problems.append(f"schema: {label}: {'/'.join(map(str, error.path))}: {error.message}")


compose = merged(production, dev)

# compose.yaml alone is what gets deployed: Apple's roots only, every check on.
prod_services = production.get("services", {})
for simulator in ("appstore-sim", "play-sim"):
    if simulator in prod_services:
        problems.append(f"compose.yaml: the simulator {simulator} belongs in compose.dev.yaml only")
dev_only_flags = {"--trust-anchor", "--trust-anchor-dir", "--any-bundle-id", "--allow-xcode", "--verify-receipt-url",
                  "--sandbox-verify-receipt-url", "--app-store-api-url", "--app-store-api-sandbox-url",
                  "--sandbox-content", "--play-api-url", "--play-certs-url"}
for name, service in prod_services.items():
    used = dev_only_flags & set(service.get("command", []))
    if used:
        problems.append(f"compose.yaml: {name} passes development flags {sorted(used)}")
    if any("sim" in str(v).split(":")[0] for v in service.get("volumes", [])):
        problems.append(f"compose.yaml: {name} mounts the simulator's data (its PKI)")
    if "--seed" in service.get("command", []):
        problems.append(f"compose.yaml: {name} seeds its store on every start; production seeds nothing")
    if "--sandbox-policy" in service.get("command", []):
        policy = service["command"][service["command"].index("--sandbox-policy") + 1]
        if policy == "grant":
            problems.append(f"compose.yaml: {name} grants sandbox purchases as real value")
for name, service in prod_services.items():
    # The console is private: published on the host's loopback only (operators reach it over SSH or a VPN).
    private = name == "console" and all(str(p).startswith("127.0.0.1:") for p in service.get("ports", []))
    if name != "edge" and service.get("ports") and not private:
        problems.append(f"compose.yaml: {name} publishes ports; only the edge is reachable from outside")
if "--tls-cert" not in prod_services.get("console", {}).get("command", []):
    problems.append("compose.yaml: the console binds every interface of its container, so it must serve HTTPS (--tls-cert, --tls-key)")
if not prod_services.get("edge", {}).get("ports"):
    problems.append("compose.yaml: the edge must publish its port")
if "--tls-cert" not in prod_services.get("edge", {}).get("command", []):
    problems.append("compose.yaml: the edge must serve HTTPS (--tls-cert, --tls-key)")
bundle_ids = str(prod_services.get("verification", {}).get("environment", {}).get("IAP_BUNDLE_IDS", ""))
if ":?" not in bundle_ids:
    problems.append("compose.yaml: verification must require IAP_BUNDLE_IDS (${IAP_BUNDLE_IDS:?...})")

env = {}
for line in (root / ".env").read_text().splitlines():
    line = line.strip()
    if line and not line.startswith("#"):
        key, _, value = line.partition("=")
        env[key] = value

# up.sh's services array: "name executable port [flags...]"
up = (root / "up.sh").read_text()
block = re.search(r"^services=\(\n(.*?)^\)", up, re.S | re.M)
local = {}
for entry in re.findall(r'^\s*"(.*)"\s*$', block.group(1), re.M):
    name, exe, port, *flags = shlex.split(entry)
    local[name] = (exe, port, flags)

def variable(text):
    """The variable a port refers to: $NAME or ${NAME}."""
    m = re.fullmatch(r"\$\{?([A-Z_]+)\}?", text)
    return m.group(1) if m else None

def flag_names(words):
    return sorted(w for w in words if w.startswith("--"))

services = compose.get("services", {})
if set(services) != set(local):
    problems.append(f"services differ: compose {sorted(services)}, up.sh {sorted(local)}")
for name, service in services.items():
    if name not in local:
        continue
    exe, port, flags = local[name]
    command = service.get("command", [])
    if not command or command[0] != exe:
        problems.append(f"{name}: compose runs {command[:1]}, up.sh runs {exe}")
        continue
    args = command[1:]
    compose_port = args[args.index("--port") + 1] if "--port" in args else None
    if compose_port is None or variable(compose_port) != variable(port):
        problems.append(f"{name}: port {compose_port} in compose, {port} in up.sh")
    elif variable(port) not in env:
        problems.append(f"{name}: {variable(port)} is not in compose/.env")
    if flag_names(args) != flag_names(["--port"] + flags):
        problems.append(f"{name}: flags {flag_names(args)} in compose, {flag_names(['--port'] + flags)} in up.sh")
    published = [p for p in service.get("ports", []) if compose_port and compose_port in str(p)]
    if name == "edge":
        if not published:
            problems.append("edge: its port must be published")
    elif not published or not all(str(p).startswith("127.0.0.1:") for p in service.get("ports", [])):
        problems.append(f"{name}: in development its port must be published, and only on 127.0.0.1")
    if "healthcheck" not in service:
        problems.append(f"{name}: no healthcheck")
    if name != "edge" and not any(str(v).endswith(":/data") for v in service.get("volumes", [])):
        problems.append(f"{name}: no named volume on /data for its SQLite file")
    for used in re.findall(r"\$\{([A-Z_]+)\}", json.dumps(service)):
        if used not in env and used not in ("IAP_ADMIN_TOKEN", "IAP_INTERNAL_TOKEN", "IAP_LOG_LEVEL", "IAP_BUNDLE_IDS",
                                            "IAP_CONTENT_URL_KEY", "IAP_EDGE_CERT_DIR", "IAP_EDGE_PUBLIC_URL"):
            problems.append(f"{name}: uses ${{{used}}}, which compose/.env does not define")


# Each service gets only the tokens it checks or presents (the simulator none).
needed_tokens = {
    "accounts": {"IAP_INTERNAL_TOKEN"}, "catalog": {"IAP_ADMIN_TOKEN", "IAP_INTERNAL_TOKEN"}, "verification": {"IAP_INTERNAL_TOKEN"},
    "fulfillment": {"IAP_ADMIN_TOKEN", "IAP_INTERNAL_TOKEN"}, "edge": {"IAP_INTERNAL_TOKEN"}, "appstore-sim": set(), "play-sim": set(),
    "console": {"IAP_ADMIN_TOKEN", "IAP_INTERNAL_TOKEN"},
}
for name, service in compose.get("services", {}).items():
    given = {k for k in service.get("environment", {}) if k.endswith("_TOKEN")}
    if name in needed_tokens and given != needed_tokens[name]:
        problems.append(f"{name}: given tokens {sorted(given)}, needs {sorted(needed_tokens[name])}")

# compose.postgres.yaml: valid, and every instance of accounts, catalog and fulfillment on the database, with the
# same command as its first instance, and every caller given every instance.
pg = yaml.safe_load((root / "compose.postgres.yaml").read_text())
for error in jsonschema.Draft7Validator(schema).iter_errors(pg):
    problems.append(f"schema: compose.postgres.yaml: {'/'.join(map(str, error.path))}: {error.message}")
scaled = merged(production, pg)
for name in ("accounts", "catalog", "fulfillment"):
    for instance in (name, f"{name}-2"):
        service = scaled["services"].get(instance, {})
        if "IAP_DATABASE_URL" not in service.get("environment", {}):
            problems.append(f"compose.postgres.yaml: {instance} is not on PostgreSQL")
        elif not str(service["environment"]["IAP_DATABASE_URL"]).startswith(f"postgres://iap_{name}:"):
            # Its own login (compose/postgres-roles.sh), owning its schema only: never the superuser, never another's.
            problems.append(f"compose.postgres.yaml: {instance} signs in to PostgreSQL as another service's login or the superuser")
        given = {k for k in service.get("environment", {}) if k.endswith("_TOKEN")}
        if given != needed_tokens[name]:
            problems.append(f"compose.postgres.yaml: {instance} given tokens {sorted(given)}, needs {sorted(needed_tokens[name])}")
    first, second = scaled["services"][name].get("command", []), scaled["services"].get(f"{name}-2", {}).get("command", [])
    if set(flag_names(second)) != set(flag_names(first)) - {"--seed"}:
        problems.append(f"compose.postgres.yaml: {name}-2 runs {second}, {name} runs {first}")
for caller, deps in (("fulfillment", ("accounts", "catalog")), ("fulfillment-2", ("accounts", "catalog")),
                     ("edge", ("accounts", "catalog", "fulfillment"))):
    env_of = scaled["services"][caller].get("environment", {})
    for dep in deps:
        addr = str(env_of.get(f"IAP_{dep.upper()}_ADDR", ""))
        if addr.split(",") != [f"{dep}:${{IAP_{dep.upper()}_PORT}}", f"{dep}-2:${{IAP_{dep.upper()}_PORT}}"]:
            problems.append(f"compose.postgres.yaml: {caller} reaches {dep} at {addr!r}, not at both instances")
# Verification runs once: every instance that calls it (fulfillment's; accounts' for app transactions) is given its address.
for caller in ("accounts", "accounts-2", "fulfillment", "fulfillment-2"):
    addr = str(scaled["services"][caller].get("environment", {}).get("IAP_VERIFICATION_ADDR", ""))
    if addr != "verification:${IAP_VERIFICATION_PORT}":
        problems.append(f"compose.postgres.yaml: {caller} reaches verification at {addr!r}")

for pair in sys.argv[2:]:  # the default ports, as the Swift code has them (DefaultPorts)
    name, _, port = pair.partition("=")
    key = f"IAP_{name.upper()}_PORT"
    if env.get(key) != port:
        problems.append(f"compose/.env: {key}={env.get(key)}, the Swift code's default port is {port}")

print("\n".join(problems))
sys.exit(1 if problems else 0)
