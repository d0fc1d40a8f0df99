#!/usr/bin/env python3
"""Each service of Docker Compose files as Compose would run it, for the deployed-configuration tests.

    python compose/compose_services.py compose/compose.yaml [compose/compose.postgres.yaml ...]

The files are merged in order as Compose merges them (mappings merge, `command` replaces, `volumes`/`ports`
add up), YAML anchors and merge keys resolved by PyYAML, and every `${...}` interpolated from compose/.env and
this process's environment (the process wins), with Compose's forms: `${V}`, `${V:-default}`, `${V-default}`,
`${V:?error}`, `${V?error}`, `${V:+alternative}`, `${V+alternative}`. A required variable that is missing stops
with its message, as `docker compose` does. Prints {service: {"command": [...], "environment": {...}}} as JSON.
"""
import json
import os
import re
import sys
from pathlib import Path

import yaml

PATTERN = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])((?:[^{}]|\{[^{}]*\})*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(text, env):
    def one(match):
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        op, arg = match.group(2), match.group(3) or ""
        value = env.get(name)
        present = value is not None and (value != "" or not (op or "").startswith(":"))
        if op in (None, ""):
            return value or ""
        if op.endswith("-"):
            return value if present else interpolate(arg, env)
        if op.endswith("?"):
            if not present:
                sys.exit(f"required variable {name} is missing: {arg}")
            return value
        return interpolate(arg, env) if present else ""  # "+" forms
    return PATTERN.sub(one, text)


def resolve(node, env):
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [resolve(v, env) for v in node]
    if isinstance(node, dict):
        return {k: resolve(v, env) for k, v in node.items()}
    return node


def merged(base, override):
    """Compose's merge of an override file: mappings merge, command replaces, volumes and ports add up."""
    out = dict(base)
    for key, value in override.items():
        if key in out and isinstance(out[key], dict) and isinstance(value, dict):
            out[key] = merged(out[key], value)
        elif key in ("volumes", "ports") and isinstance(out.get(key), list):
            out[key] = out[key] + [v for v in value if v not in out[key]]
        else:
            out[key] = value
    return out


def main():
    files = [Path(f) for f in sys.argv[1:]]
    env = {}
    dotenv = files[0].resolve().parent / ".env"
    for line in dotenv.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    env.update(os.environ)
    document = {}
    for path in files:
        document = merged(document, yaml.safe_load(path.read_text()))
    services = {}
    for name, service in document.get("services", {}).items():
        service = resolve(service, env)
        environment = service.get("environment", {})
        if isinstance(environment, list):
            environment = dict(item.partition("=")[::2] for item in environment)
        command = service.get("command", [])
        services[name] = {
            "command": command if isinstance(command, list) else command.split(),
            "environment": {k: "" if v is None else str(v) for k, v in environment.items()},
        }
    print(json.dumps(services, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
