"""Run a GitHub Actions workflow's jobs here, step by step, the way a runner would.

Enough of Actions for deploy/github/workflows/crcr.yml, done for real where it can be:

- ``${{ }}`` expressions: contexts (github, env, vars, matrix, needs, steps), ``||``,
  ``&&``, ``!``, ``==``, ``!=``, literals, ``always() success() failure()
  hashFiles() fromJSON() toJSON()``; a step's ``if:`` (default ``success()``);
- ``run:`` steps in ``bash --noprofile --norc -eo pipefail`` with the workflow's, job's
  and step's ``env``, and the runner's variables (``GITHUB_EVENT_PATH``,
  ``GITHUB_OUTPUT``, ``GITHUB_RUN_ID``...); step outputs, job outputs, ``needs``,
  matrices from ``fromJSON``;
- ``actions/upload-artifact@v4`` / ``download-artifact@v4`` with v4's rules: nothing
  uploaded when no file matches (``if-no-files-found: error`` fails the step), and a
  download of an artifact that does not exist fails the step;
- ``actions/checkout@v4`` copies the backend repository's tree into a fresh workspace;
  with ``repository``/``ref``/``path``/``sparse-checkout`` it writes that commit's tree
  from a local clone of the repository (the fetch from github.com is what is replaced).

What cannot run here: the composite action ``./.github/actions/crcr`` installs Python,
torch and crcr from the network; this machine has them installed already, so the step
only checks that the action file is in the checkout.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# -- expressions -----------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)|(?P<op>==|!=|&&|\|\||[!(),\[\]])"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z_*][A-Za-z0-9_\-]*)*))")


class ExprError(Exception):
    pass


def _truthy(v: Any) -> bool:
    return v not in (None, False, 0, "") and not (isinstance(v, float) and v != v)


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict | list):
        return json.dumps(v)
    return str(v)


class _Parser:
    def __init__(self, text: str, ctx: dict[str, Any], funcs: dict[str, Any]) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m:
                raise ExprError(f"cannot parse {text[pos:]!r}")
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i, self.ctx, self.funcs = 0, ctx, funcs

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise ExprError(f"expected {value!r}, got {tok}")
        self.i += 1
        return tok

    def parse(self) -> Any:
        v = self.or_()
        if self.peek() is not None:
            raise ExprError(f"trailing {self.peek()}")
        return v

    def or_(self) -> Any:
        v = self.and_()
        while self.peek() == ("op", "||"):
            self.take()
            rhs = self.and_()
            v = v if _truthy(v) else rhs
        return v

    def and_(self) -> Any:
        v = self.cmp()
        while self.peek() == ("op", "&&"):
            self.take()
            rhs = self.cmp()
            v = rhs if _truthy(v) else v
        return v

    def cmp(self) -> Any:
        v = self.unary()
        while self.peek() in (("op", "=="), ("op", "!=")):
            op = self.take()[1]
            rhs = self.unary()
            same = (str(v).lower() == str(rhs).lower()) if isinstance(v, str) and isinstance(rhs, str) else v == rhs
            v = same if op == "==" else not same
        return v

    def unary(self) -> Any:
        if self.peek() == ("op", "!"):
            self.take()
            return not _truthy(self.unary())
        return self.atom()

    def atom(self) -> Any:
        kind, value = self.take()
        if kind == "str":
            return value[1:-1].replace("''", "'")
        if kind == "num":
            return float(value) if "." in value else int(value)
        if kind == "op" and value == "(":
            v = self.or_()
            self.take(")")
            return v
        if kind == "name":
            if value in ("true", "false"):
                return value == "true"
            if value == "null":
                return None
            if self.peek() == ("op", "("):
                self.take("(")
                args = []
                while self.peek() != ("op", ")"):
                    args.append(self.or_())
                    if self.peek() == ("op", ","):
                        self.take()
                self.take(")")
                return self.funcs[value](*args)
            cur: Any = self.ctx
            for part in value.split("."):
                cur = cur.get(part) if isinstance(cur, dict) else None
            return cur
        raise ExprError(f"unexpected {value!r}")


def evaluate(text: str, ctx: dict[str, Any], funcs: dict[str, Any]) -> Any:
    return _Parser(text, ctx, funcs).parse()


def interpolate(value: Any, ctx: dict[str, Any], funcs: dict[str, Any]) -> Any:
    """``${{ expr }}`` inside a string; a string that is only one expression keeps its value's type."""
    if not isinstance(value, str):
        return value
    whole = re.fullmatch(r"\s*\$\{\{(.*?)\}\}\s*", value, re.S)
    if whole:
        return evaluate(whole[1], ctx, funcs)
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: _text(evaluate(m[1], ctx, funcs)), value, flags=re.S)


# -- running ----------------------------------------------------------------------------------
@dataclass
class StepResult:
    name: str
    outcome: str  # success | failure | skipped
    output: str = ""


@dataclass
class JobRun:
    job: str
    matrix: dict[str, Any]
    steps: list[StepResult] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    workspace: Path | None = None

    @property
    def ok(self) -> bool:
        return all(s.outcome != "failure" for s in self.steps)

    def log(self) -> str:
        return "\n".join(f"--- {s.name}: {s.outcome}\n{s.output[-3000:]}" for s in self.steps)


class Runner:
    """``Runner(workflow, repo_tree, tmp).run("repository_dispatch", event)`` -> every job run."""

    def __init__(self, workflow: Path, repo_tree: Path, tmp: Path, *, variables: dict[str, str],
                 env: dict[str, str], repository: str = "org/backend", clones: dict[str, Path] | None = None) -> None:
        self.wf = yaml.safe_load(workflow.read_text())
        self.name = self.wf.get("name", workflow.stem)
        self.repo_tree, self.tmp = repo_tree, tmp
        self.vars, self.base_env, self.repository = variables, env, repository
        self.clones = clones or {}  # other repositories a checkout may name: owner/name -> local git clone
        self.artifacts = tmp / "artifacts"
        self.artifacts.mkdir(parents=True, exist_ok=True)
        self.run_id = str(abs(hash(uuid.uuid4())) % 10**10)

    def triggers(self) -> dict[str, Any]:
        on = self.wf.get(True, self.wf.get("on"))  # YAML 1.1 reads `on:` as True
        return on if isinstance(on, dict) else {on: None}

    def run(self, event_name: str, event: dict[str, Any]) -> dict[str, list[JobRun]]:
        if event_name not in self.triggers():
            raise AssertionError(f"the workflow does not declare {event_name}")
        if event_name == "repository_dispatch":
            types = (self.triggers()[event_name] or {}).get("types")
            if types and event.get("action") not in types:
                return {}  # GitHub would not start the workflow
        event_path = self.tmp / f"event-{event_name}.json"
        event_path.write_text(json.dumps(event))
        github = {"event": event, "event_name": event_name, "token": "gh-token-not-used-here",
                  "repository": self.repository, "run_id": self.run_id, "run_attempt": "1",
                  "workflow": self.name, "server_url": "https://github.com"}
        done: dict[str, list[JobRun]] = {}
        pending = dict(self.wf["jobs"])
        while pending:
            ready = [j for j, spec in pending.items() if all(n in done for n in _needs(spec))]
            if not ready:
                raise AssertionError(f"jobs with unmet needs: {sorted(pending)}")
            for job_id in ready:
                spec = pending.pop(job_id)
                needs = {n: {"outputs": done[n][0].outputs if done[n] else {},
                             "result": "success" if done[n] and all(r.ok for r in done[n]) else "failure"}
                         for n in _needs(spec)}
                if any(v["result"] != "success" for v in needs.values()):
                    done[job_id] = []
                    continue
                done[job_id] = self._job(job_id, spec, github, needs, event_path)
        return done

    def _job(self, job_id: str, spec: dict[str, Any], github: dict[str, Any], needs: dict[str, Any],
             event_path: Path) -> list[JobRun]:
        ctx_base = {"github": github, "vars": self.vars, "needs": needs, "secrets": {}}
        matrix_spec = (spec.get("strategy") or {}).get("matrix")
        combos: list[dict[str, Any]] = [{}]
        if matrix_spec is not None:
            m = interpolate(matrix_spec, {**ctx_base, "env": {}}, _funcs(None, "success"))
            combos = list(m.get("include") or [])
            assert combos, f"job {job_id}: empty matrix {m}"
        return [self._job_once(job_id, spec, {**ctx_base, "matrix": combo}, event_path) for combo in combos]

    def _job_once(self, job_id: str, spec: dict[str, Any], ctx: dict[str, Any], event_path: Path) -> JobRun:
        run = JobRun(job_id, ctx.get("matrix", {}))
        workspace = self.tmp / f"ws-{job_id}-{uuid.uuid4().hex[:6]}"
        workspace.mkdir()
        run.workspace = workspace
        funcs_status = {"status": "success"}
        env: dict[str, str] = {}
        for key, value in (self.wf.get("env") or {}).items():
            env[key] = _text(interpolate(value, {**ctx, "env": env}, _funcs(workspace, "success")))
        for key, value in (spec.get("env") or {}).items():
            env[key] = _text(interpolate(value, {**ctx, "env": env}, _funcs(workspace, "success")))
        steps_ctx: dict[str, Any] = {}
        for index, step in enumerate(spec["steps"]):
            name = step.get("name") or step.get("uses") or f"step {index}"
            funcs = _funcs(workspace, funcs_status["status"])
            sctx = {**ctx, "env": env, "steps": steps_ctx}
            cond = step.get("if", "success()")
            cond = cond[3:-2] if isinstance(cond, str) and cond.strip().startswith("${{") else cond
            if not _truthy(evaluate(str(cond), sctx, funcs)):
                run.steps.append(StepResult(name, "skipped"))
                continue
            step_env = {k: _text(interpolate(v, sctx, funcs)) for k, v in (step.get("env") or {}).items()}
            ok, output, outputs = self._step(step, {**env, **step_env}, sctx, funcs, workspace, event_path, job_id)
            if step.get("id"):
                steps_ctx[step["id"]] = {"outputs": outputs, "outcome": "success" if ok else "failure"}
            run.steps.append(StepResult(name, "success" if ok else "failure", output))
            if not ok:
                funcs_status["status"] = "failure"
        final_ctx = {**ctx, "env": env, "steps": steps_ctx}
        run.outputs = {k: _text(interpolate(v, final_ctx, _funcs(workspace, funcs_status["status"])))
                       for k, v in (spec.get("outputs") or {}).items()}
        return run

    def _step(self, step: dict[str, Any], env: dict[str, str], ctx: dict[str, Any], funcs: dict[str, Any],
              workspace: Path, event_path: Path, job_id: str) -> tuple[bool, str, dict[str, str]]:
        uses = step.get("uses")
        if uses is not None:
            with_ = {k: interpolate(v, ctx, funcs) for k, v in (step.get("with") or {}).items()}
            return (*self._action(uses, with_, workspace), {})
        script = interpolate(step["run"], ctx, funcs)
        out_file = workspace.parent / f"output-{uuid.uuid4().hex[:8]}"
        out_file.write_text("")
        script_file = workspace.parent / f"step-{uuid.uuid4().hex[:8]}.sh"
        script_file.write_text(script)
        full_env = {**self.base_env, **env, "GITHUB_EVENT_PATH": str(event_path), "GITHUB_OUTPUT": str(out_file),
                    "GITHUB_EVENT_NAME": ctx["github"]["event_name"], "GITHUB_RUN_ID": self.run_id,
                    "GITHUB_RUN_ATTEMPT": "1", "GITHUB_JOB": job_id, "GITHUB_WORKFLOW": self.name,
                    "GITHUB_REPOSITORY": self.repository, "GITHUB_SERVER_URL": "https://github.com",
                    "GITHUB_WORKSPACE": str(workspace), "RUNNER_TEMP": str(workspace.parent),
                    "CI": "true", "GITHUB_ACTIONS": "true"}
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script_file)], cwd=workspace,
                              env=full_env, capture_output=True, text=True, timeout=900, check=False)
        return proc.returncode == 0, proc.stdout + proc.stderr, _read_outputs(out_file.read_text())

    def _action(self, uses: str, with_: dict[str, Any], workspace: Path) -> tuple[bool, str]:
        if uses == "actions/checkout@v4" and with_.get("repository"):
            clone = self.clones.get(str(with_["repository"]))
            if clone is None:
                return False, f"no clone of {with_['repository']} here"
            dest = workspace / str(with_.get("path", "."))
            dest.mkdir(parents=True, exist_ok=True)
            sparse = [p for p in str(with_.get("sparse-checkout") or "").split() if p]
            archive = subprocess.run(["git", "-C", str(clone), "archive", "--format=tar", str(with_["ref"]), *sparse],
                                     capture_output=True, check=False)
            if archive.returncode != 0:
                return False, archive.stderr.decode()
            subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
            return True, f"checked out {with_['repository']}@{with_['ref']} ({' '.join(sparse) or 'all'}) into {dest}"
        if uses == "actions/checkout@v4":
            shutil.copytree(self.repo_tree, workspace, dirs_exist_ok=True)
            return True, f"checked out {self.repo_tree}"
        if uses.startswith("./"):
            action = workspace / uses[2:] / "action.yml"
            return action.is_file(), f"composite action {uses}: installs nothing here (crcr and torch are installed)"
        if uses == "actions/upload-artifact@v4":
            name = str(with_["name"])
            paths = [p.strip() for p in str(with_["path"]).splitlines() if p.strip()]
            found = [workspace / p for p in paths if (workspace / p).is_file()]
            if not found:
                how = with_.get("if-no-files-found", "warn")
                msg = f"No files were found with the provided path: {' '.join(paths)}. No artifacts will be uploaded."
                return how != "error", msg
            dest = self.artifacts / name
            if dest.exists():
                return False, f"an artifact named {name} already exists (v4 artifacts are immutable)"
            dest.mkdir(parents=True)
            for f in found:
                shutil.copy2(f, dest / f.name)
            return True, f"uploaded {[f.name for f in found]} as {name}"
        if uses == "actions/download-artifact@v4":
            name = str(with_["name"])
            src = self.artifacts / name
            if not src.is_dir():
                return False, f"Unable to download artifact(s): Artifact not found for name: {name}"
            shutil.copytree(src, workspace / str(with_.get("path", ".")), dirs_exist_ok=True)
            return True, f"downloaded {name}"
        return False, f"action {uses} is not known to this runner"


def _needs(spec: dict[str, Any]) -> list[str]:
    needs = spec.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def _funcs(workspace: Path | None, status: str) -> dict[str, Any]:
    def hash_files(*patterns: str) -> str:
        files = sorted(f for p in patterns for f in (workspace.glob(p) if workspace else []) if f.is_file())
        if not files:
            return ""
        h = hashlib.sha256()
        for f in files:
            h.update(hashlib.sha256(f.read_bytes()).digest())
        return h.hexdigest()

    return {"always": lambda: True, "success": lambda: status == "success", "failure": lambda: status == "failure",
            "cancelled": lambda: False, "hashFiles": hash_files, "fromJSON": lambda s: json.loads(s),
            "toJSON": lambda v: json.dumps(v), "format": lambda f, *a: f.format(*a)}


def _read_outputs(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^([A-Za-z0-9_\-]+)<<(.+)$", line)
        if m:
            end, value = m[2], []
            i += 1
            while i < len(lines) and lines[i] != end:
                value.append(lines[i])
                i += 1
            out[m[1]] = "\n".join(value)
        elif "=" in line:
            k, _, v = line.partition("=")
            out[k] = v
        i += 1
    return out


def clean_env() -> dict[str, str]:
    """This process's environment without crcr settings or a CI job's identity."""
    drop = ("CRCR_", "GITHUB_", "ACTIONS_", "RUNNER_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}
