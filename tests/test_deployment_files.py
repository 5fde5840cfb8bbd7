"""The deployment files (compose.yaml, deploy/compose/, deploy/k8s/) agree with the bridge
they deploy: every variable they set is one the bridge reads, the replicas share one volume
where the image keeps its state and sandboxes, and the balancer and the Service reach the
port the image serves on.

This reads them as an operator's tools would and checks what a typo would break, for the
Kubernetes manifests above all (no cluster here). compose.yaml is also brought up for real
by scripts/compose_check, which runs tests/compose/stack_check.py against its replicas.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from a2a_acp_bridge.config import SETTINGS

ROOT = Path(__file__).resolve().parents[1]
KNOWN = {row.variable for row in SETTINGS if row.variable is not None}
# Read by the image itself (Dockerfile), not by the bridge's settings table.
IMAGE_VARIABLES = {"HOME"}


def dockerfile_env() -> dict[str, str]:
    """The ENV of the Dockerfile's final stage, as NAME=VALUE pairs."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    final = text.rsplit("\nFROM ", 1)[-1]
    found: dict[str, str] = {}
    for line in final.splitlines():
        if line.startswith("ENV "):
            found.update(re.findall(r"([A-Z_][A-Z0-9_]*)=(\S+)", line))
    return found


def manifests() -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for path in sorted((ROOT / "deploy" / "k8s").glob("*.yaml")):
        documents += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return documents


def test_the_image_keeps_state_and_sandboxes_under_data() -> None:
    env = dockerfile_env()
    for variable in ("ACP_STATE_DIR", "ACP_SANDBOX_DIR"):
        assert Path(env[variable]).is_relative_to("/data"), variable
    assert env["PORT"] == "41241"


def test_compose_sets_only_settings_the_bridge_reads_and_shares_one_volume() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    bridge = compose["services"]["bridge"]
    assert set(bridge["environment"]) <= KNOWN, set(bridge["environment"]) - KNOWN
    assert bridge["environment"]["A2A_DATABASE_URL"].startswith("postgresql+asyncpg://")
    assert bridge["deploy"]["replicas"] == 3
    assert "shared:/data" in bridge["volumes"]
    assert "shared" in compose["volumes"]
    caddyfile = (ROOT / "deploy" / "compose" / "Caddyfile").read_text()
    assert re.search(r"name bridge\s+port " + dockerfile_env()["PORT"], caddyfile)
    assert "lb_policy round_robin" in caddyfile
    # A request whose replica has just died is tried on another.
    assert "lb_try_duration" in caddyfile
    # Streams go through as they are written.
    assert "flush_interval -1" in caddyfile


def test_the_kubernetes_deployment_matches_the_image_and_shares_its_volume() -> None:
    documents = manifests()
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in documents}
    deployment = by_kind[("Deployment", "a2a-bridge")]
    pod = deployment["spec"]["template"]["spec"]
    [container] = [c for c in pod["containers"] if c["name"] == "bridge"]
    names = {entry["name"] for entry in container.get("env", [])}
    assert names <= KNOWN | IMAGE_VARIABLES, names - KNOWN
    # Every variable is named (a whole secret would hand the bridge what it never reads).
    assert "envFrom" not in container
    assert {"A2A_TOKEN", "A2A_PUSH_KEY", "A2A_DATABASE_URL"} <= names
    port = int(dockerfile_env()["PORT"])
    assert [p["containerPort"] for p in container["ports"]] == [port]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
    assert {"name": "shared", "mountPath": "/data"} in container["volumeMounts"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "shared"]
    claim = by_kind[("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    service = by_kind[("Service", "a2a-bridge")]
    assert [p["targetPort"] for p in service["spec"]["ports"]] == [port]
    assert deployment["spec"]["replicas"] == 3


def test_the_compose_check_changes_only_ports_and_limits() -> None:
    check = yaml.safe_load((ROOT / "deploy" / "compose" / "check.yaml").read_text())
    assert set(check["services"]) == {"bridge"}
    bridge = check["services"]["bridge"]
    assert set(bridge) == {"ports", "environment"}
    assert set(bridge["environment"]) == {"ACP_MAX_SESSIONS", "ACP_ADMISSION_TIMEOUT_MS"}
    # Loopback only, a port of the engine's choosing for each replica.
    assert bridge["ports"] == ["127.0.0.1::" + dockerfile_env()["PORT"]]


def test_the_postgres_stand_in_honours_what_compose_sets() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    db = compose["services"]["db"]
    entrypoint = (ROOT / "deploy" / "compose" / "local" / "postgres" / "entrypoint.sh").read_text()
    for variable in db["environment"]:
        assert f"${{{variable}" in entrypoint or f"${variable}" in entrypoint, variable
    assert "db:/var/lib/postgresql/data" in db["volumes"]
    dockerfile = (ROOT / "deploy" / "compose" / "local" / "postgres" / "Dockerfile").read_text()
    assert "PGDATA=/var/lib/postgresql/data" in dockerfile


def test_every_kubernetes_manifest_is_valid_for_the_api_strictly() -> None:
    # The API's own schemas, shipped with kubernetes-validate: an unknown or misplaced field
    # (a typo kubectl would reject, or silently drop) fails here.
    version = kubernetes_validate.latest_version()
    for document in manifests():
        kubernetes_validate.validate(document, version, strict=True)
