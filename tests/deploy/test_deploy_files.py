"""deploy/ is checked by the tools operators would use: hadolint, kubernetes-validate,
GitHub's workflow/action schemas (check-jsonschema's vendored copies), docker-compose."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    """A validator installed with the dev extra (beside this Python), or on PATH."""
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    assert path, f"{name} is not installed: pip install -e '.[dev]'"
    return str(path)


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, **(env or {})})


# -- Dockerfile ------------------------------------------------------------------------------
def test_dockerfile_passes_hadolint():
    r = run(tool("hadolint"), "--failure-threshold", "info", "deploy/Dockerfile")
    assert r.returncode == 0, r.stdout + r.stderr


def test_image_runs_serve_as_non_root_without_torch():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\}$", text, re.M)
    assert 'ARG PYTHON_IMAGE=python:3.11-slim' in text
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1].split(":")[0] not in ("root", "0")
    installs = " ".join(re.findall(r"pip install[^\n]*", text))
    assert "crcr[postgres,redis,fast]" in installs and "torch" not in installs
    assert 'ENTRYPOINT ["crcr"]' in text and 'CMD ["serve"]' in text
    # everything COPY'd from the build context survives the dockerignore
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text()
    for src in re.findall(r"^COPY (?!--from)(\S+)", text, re.M):
        assert f"!{src}" in ignore or f"!{src}/**" in ignore, src
        assert (ROOT / src).exists(), src


# -- Kubernetes --------------------------------------------------------------------------------
def rendered() -> list[dict]:
    """The kustomization rendered the way kustomize would for these files: resources, namespace, images."""
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    images = {i["name"]: f"{i['newName']}:{i['newTag']}" for i in kust.get("images", [])}
    docs = []
    for res in kust["resources"]:
        for doc in yaml.safe_load_all((K8S / res).read_text()):
            if doc["kind"] != "Namespace":
                doc["metadata"]["namespace"] = kust["namespace"]
            for c in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                c["image"] = images.get(c["image"], c["image"])
            docs.append(doc)
    return docs


def test_manifests_validate_against_the_kubernetes_schema(tmp_path):
    out = tmp_path / "rendered.yaml"
    out.write_text(yaml.safe_dump_all(rendered()))
    files = [str(out), str(K8S / "secret.example.yaml")]
    r = run(tool("kubernetes-validate"), "--strict", "--quiet", *files)
    assert r.returncode == 0, r.stdout + r.stderr


def by_kind(kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in rendered() if d["kind"] == kind}


def test_serve_and_worker_wiring():
    deps = by_kind("Deployment")
    assert set(deps) == {"crcr-serve", "crcr-worker"}
    serve = deps["crcr-serve"]["spec"]["template"]["spec"]
    (c,) = serve["containers"]
    assert c["image"] == "ghcr.io/example/crcr:0.1.0"
    assert c["args"][0] == "serve"
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    worker = deps["crcr-worker"]["spec"]["template"]["spec"]["containers"][0]
    assert worker["args"][0] == "worker" and "--no-migrate" in worker["args"]
    for d in deps.values():
        pod = d["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        cont = pod["containers"][0]
        assert cont["securityContext"]["readOnlyRootFilesystem"] is True
        refs = [e.get("secretRef", {}).get("name") for e in cont["envFrom"]]
        assert "crcr-secrets" in refs  # secrets are referenced, never included
        for vol in pod["volumes"]:
            if "configMap" in vol:
                assert vol["configMap"]["name"] in by_kind("ConfigMap")
    assert not by_kind("Secret"), "the kustomization must not ship a Secret"


def test_service_and_pdbs_select_the_pods():
    labels = {n: d["spec"]["template"]["metadata"]["labels"] for n, d in by_kind("Deployment").items()}

    def selects(selector: dict) -> set[str]:
        return {n for n, lab in labels.items() if all(lab.get(k) == v for k, v in selector.items())}

    (svc,) = by_kind("Service").values()
    assert selects(svc["spec"]["selector"]) == {"crcr-serve"}
    assert svc["spec"]["ports"][0]["targetPort"] == "http"
    pdbs = by_kind("PodDisruptionBudget")
    assert {frozenset(selects(p["spec"]["selector"]["matchLabels"])) for p in pdbs.values()} == {
        frozenset({"crcr-serve"}), frozenset({"crcr-worker"})}


def test_configmap_allowlist_is_valid_crcr_format():
    from relay.allowlist import parse_allowlist_text

    (cm,) = by_kind("ConfigMap").values()
    parse_allowlist_text(cm["data"]["allowlist.yaml"], source="configmap")
    from crcr.settings import Settings

    known = {f"CRCR_{k.upper()}" for k in Settings.model_fields}
    assert {k for k in cm["data"] if k.startswith("CRCR_")} <= known


# -- docker-compose ------------------------------------------------------------------------------
COMPOSE = DEPLOY / "docker-compose.yml"


def test_compose_service_wiring():
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    assert set(services) == {"relay", "worker", "postgres", "redis"}
    relay, worker = services["relay"], services["worker"]
    assert relay["command"][0] == "serve" and worker["command"][0] == "worker"
    assert relay["image"] == worker["image"]
    assert relay["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert relay["depends_on"]["redis"]["condition"] == "service_healthy"
    assert worker["depends_on"]["relay"]["condition"] == "service_healthy"
    env = relay["environment"]
    assert "@postgres:5432/" in env["CRCR_DATABASE_URL"] and env["CRCR_QUEUE_URL"].startswith("redis://redis:6379")
    for name in ("relay", "worker"):
        for secret in services[name].get("secrets", []):
            assert secret in doc["secrets"]
    assert all("healthcheck" in services[s] for s in ("relay", "postgres", "redis"))


def test_docker_compose_config_accepts_the_file():
    """Debian's docker-compose parses the file where it is installed; elsewhere the wiring test stands in."""
    exe = shutil.which("docker-compose")
    if exe is None:
        test_compose_service_wiring()
        return
    r = run(exe, "-f", str(COMPOSE), "config", "-q", env={"POSTGRES_PASSWORD": "x", "CRCR_WEBHOOK_SECRET": "y"})
    assert r.returncode == 0, r.stdout + r.stderr
    r = run(exe, "-f", str(COMPOSE), "config", env={"POSTGRES_PASSWORD": "x"})
    assert r.returncode != 0 and "CRCR_WEBHOOK_SECRET" in r.stderr  # a missing secret stops `up`, loudly


# -- GitHub: workflow, composite action, App manifest --------------------------------------------
WORKFLOW = DEPLOY / "github/workflows/crcr.yml"
ACTION = DEPLOY / "github/actions/crcr/action.yml"


def test_workflow_and_action_match_githubs_schemas():
    exe = tool("check-jsonschema")
    r = run(exe, "--builtin-schema", "vendor.github-workflows", str(WORKFLOW))
    assert r.returncode == 0, r.stdout + r.stderr
    r = run(exe, "--builtin-schema", "vendor.github-actions", str(ACTION))
    assert r.returncode == 0, r.stdout + r.stderr


def test_workflow_runs_pick_then_sharded_run_then_report():
    wf = yaml.safe_load(WORKFLOW.read_text())
    on = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads `on:` as a boolean key
    assert on["repository_dispatch"]["types"] == ["pull_request", "push"]
    assert wf["permissions"]["id-token"] == "write"
    jobs = wf["jobs"]
    scripts = {name: "\n".join(s.get("run", "") for s in job["steps"]) for name, job in jobs.items()}
    assert "crcr select pick" in scripts["pick"] and "crcr run --matrix" in scripts["pick"]
    test = jobs["test"]
    assert test["needs"] == "pick"
    assert "fromJSON(needs.pick.outputs.matrix)" in test["strategy"]["matrix"]
    assert "--shard" in scripts["test"] and "crcr report --phase start" in scripts["test"]
    assert "crcr report --phase finish" in scripts["test"]
    # untrusted event fields reach scripts only through env, never spliced into `run:` by ${{ }}
    for job in jobs.values():
        for step in job["steps"]:
            assert not re.search(r"\$\{\{[^}]*(client_payload|github\.event)", step.get("run", "")), step


def test_composite_action_installs_pinned_torch_first():
    action = yaml.safe_load(ACTION.read_text())
    assert action["runs"]["using"] == "composite"
    assert action["inputs"]["torch-spec"]["default"] == "torch==2.13.0"
    script = "\n".join(s.get("run", "") for s in action["runs"]["steps"])
    assert script.index("TORCH_SPEC") < script.index("CRCR_SPEC")


def test_app_manifest_asks_for_exactly_what_crcr_uses():
    manifest = json.loads((DEPLOY / "github/app-manifest.json").read_text())
    assert manifest["default_permissions"] == {
        "metadata": "read",        # mandatory
        "contents": "write",       # POST /repos/{o}/{r}/dispatches (and GET commits)
        "checks": "write",         # check runs on the upstream PR
        "pull_requests": "read",   # PR head SHA and labels for /ci commands
        "issues": "write",         # reactions and the reply comment of /ci commands, approval label
        "actions": "write",        # /ci cancel cancels downstream runs
    }
    # check_suite: "Re-run all checks" arrives as check_suite rerequested (relay.checks.on_check_run)
    assert set(manifest["default_events"]) == {"pull_request", "push", "issue_comment", "check_run", "check_suite"}
    assert manifest["hook_attributes"]["url"].endswith("/webhook")
