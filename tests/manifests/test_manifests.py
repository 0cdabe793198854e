"""The manifests of docs/kubernetes.md checked without a cluster: every Kubernetes object
against the Kubernetes API's own schemas (kubernetes-validate, strict: an unknown field is
an error); the JobSet and the PyTorchJob, whose CRDs' schemas are not bundled, by their
embedded Job and pod templates against those schemas and by their own top-level fields
against small schemas written here from the CRDs' documented API (JobSet v1alpha2,
Kubeflow training operator v1); and each container's hvdrun command line, with the
variables Kubernetes would expand, through `hvdrun --dry-run` on every node rank.
Run by the virtualenv of scripts/k8s-venv.sh (tests/manifests/CMakeLists.txt)."""
import os
import re
import stat
import subprocess

import jsonschema
import kubernetes_validate
import pytest
import yaml

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                   "kubernetes.md")
K8S = "1.33"  # JobSet and the training operator support it; the schemas are bundled
SECRET = "a-secret-of-thirty-two-characters"


def manifests():
    """Every object of the doc's yaml blocks, by kind."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    found = {}
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        for obj in yaml.safe_load_all(block):
            assert obj["kind"] not in found, f"two {obj['kind']} manifests in {DOC}"
            found[obj["kind"]] = obj
    return found


def check(obj):
    kubernetes_validate.validate(obj, K8S, strict=True)


def closed(properties, required=()):
    """A JSON schema of an object with exactly these fields."""
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}


INT, BOOL, STR, ANY = {"type": "integer"}, {"type": "boolean"}, {"type": "string"}, {}
METADATA = {"type": "object", "required": ["name"]}

# JobSet v1alpha2 (jobset.x-k8s.io): JobSetSpec, ReplicatedJob, Network.
JOBSET = closed({
    "apiVersion": {"const": "jobset.x-k8s.io/v1alpha2"}, "kind": {"const": "JobSet"},
    "metadata": METADATA,
    "spec": closed({
        "replicatedJobs": {"type": "array", "minItems": 1, "items": closed({
            "name": STR, "groupName": STR, "template": {"type": "object"},
            "replicas": {"type": "integer", "minimum": 1}, "dependsOn": ANY},
            ["name", "template"])},
        "network": closed({"enableDNSHostnames": BOOL, "subdomain": STR,
                           "publishNotReadyAddresses": BOOL}),
        "successPolicy": ANY, "failurePolicy": ANY, "startupPolicy": ANY, "suspend": BOOL,
        "coordinator": ANY, "managedBy": STR, "ttlSecondsAfterFinished": INT,
        "volumeClaimPolicies": ANY}, ["replicatedJobs"])}, ["apiVersion", "kind", "spec"])

# PyTorchJob v1 (kubeflow.org): PyTorchJobSpec, ReplicaSpec.
REPLICA = closed({"replicas": {"type": "integer", "minimum": 0},
                  "template": {"type": "object"},
                  "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]}},
                 ["template"])
PYTORCHJOB = closed({
    "apiVersion": {"const": "kubeflow.org/v1"}, "kind": {"const": "PyTorchJob"},
    "metadata": METADATA,
    "spec": closed({
        "runPolicy": ANY, "elasticPolicy": ANY, "nprocPerNode": STR,
        "pytorchReplicaSpecs": {"type": "object", "properties": {"Master": REPLICA,
                                                                 "Worker": REPLICA},
                                "required": ["Master"], "additionalProperties": False}},
        ["pytorchReplicaSpecs"])}, ["apiVersion", "kind", "spec"])


def crd_check(obj, schema):
    jsonschema.Draft202012Validator(schema).validate(obj)


def test_the_doc_has_the_four_manifests():
    assert sorted(manifests()) == ["JobSet", "PyTorchJob", "Service", "StatefulSet"]
    with open(DOC, encoding="utf-8") as f:
        assert "These manifests have not been run on a real cluster." in f.read()


@pytest.mark.parametrize("kind", ["Service", "StatefulSet"])
def test_kubernetes_objects_match_the_api_schema(kind):
    check(manifests()[kind])


def test_jobset_fields_and_its_job_template():
    js = manifests()["JobSet"]
    crd_check(js, JOBSET)
    for rj in js["spec"]["replicatedJobs"]:
        check({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": f"{js['metadata']['name']}-{rj['name']}-0"},
               "spec": rj["template"]["spec"]})


def test_pytorchjob_fields_and_its_pod_templates():
    pj = manifests()["PyTorchJob"]
    crd_check(pj, PYTORCHJOB)
    for role, spec in pj["spec"]["pytorchReplicaSpecs"].items():
        check({"apiVersion": "v1", "kind": "PodTemplate",
               "metadata": {"name": f"{pj['metadata']['name']}-{role.lower()}"},
               "template": spec["template"]})


def test_a_misspelt_field_fails_each_check():
    """The checks above would catch a typo: strict schemas refuse unknown fields."""
    m = manifests()
    sts = m["StatefulSet"]
    sts["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        check(sts)
    js = m["JobSet"]
    js["spec"]["network"]["enableDnsHostnames"] = True
    with pytest.raises(jsonschema.ValidationError):
        crd_check(js, JOBSET)
    pj = m["PyTorchJob"]
    pj["spec"]["pytorchReplicaSpecs"]["Workers"] = pj["spec"]["pytorchReplicaSpecs"]["Worker"]
    with pytest.raises(jsonschema.ValidationError):
        crd_check(pj, PYTORCHJOB)


def containers(kind):
    m = manifests()[kind]
    pod = {"JobSet": lambda: m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"],
           "PyTorchJob": lambda: m["spec"]["pytorchReplicaSpecs"]["Master"]["template"],
           "StatefulSet": lambda: m["spec"]["template"]}[kind]()
    return pod["spec"]["containers"]


def flag(args, name):
    """The value of --name=V or --name V in a command line (a list, or one shell string)."""
    words = args if isinstance(args, list) else args.split()
    for i, w in enumerate(words):
        if w.startswith(f"--{name}="):
            return w.split("=", 1)[1]
        if w == f"--{name}":
            return words[i + 1]
    raise AssertionError(f"no --{name} in {args}")


def test_node_0_is_named_as_each_orchestrator_names_it():
    m = manifests()
    js = m["JobSet"]
    rj = js["spec"]["replicatedJobs"][0]
    job = rj["template"]["spec"]
    assert job["completionMode"] == "Indexed"
    assert job["parallelism"] == job["completions"] == int(flag(containers("JobSet")[0]["args"],
                                                                "nnodes"))
    assert js["spec"]["network"]["enableDNSHostnames"] is True
    subdomain = js["spec"]["network"].get("subdomain", js["metadata"]["name"])
    endpoint = flag(containers("JobSet")[0]["args"], "rdzv-endpoint")
    assert endpoint.split(":")[0] == f"{js['metadata']['name']}-{rj['name']}-0-0.{subdomain}"
    svc, sts = m["Service"], m["StatefulSet"]
    assert svc["spec"]["clusterIP"] == "None" and sts["spec"]["serviceName"] == \
        svc["metadata"]["name"]
    assert svc["spec"]["selector"] == sts["spec"]["template"]["metadata"]["labels"]
    script = containers("StatefulSet")[0]["args"][0]
    host, port = flag(script, "rdzv-endpoint").split(":")
    assert host == f"{sts['metadata']['name']}-0.{svc['metadata']['name']}"
    assert int(port) == svc["spec"]["ports"][0]["port"]
    pj = m["PyTorchJob"]["spec"]["pytorchReplicaSpecs"]
    assert pj["Master"]["replicas"] + pj["Worker"]["replicas"] == \
        int(flag(containers("PyTorchJob")[0]["args"], "nnodes"))


def expand(words, variables):
    """Kubernetes' $(VAR) expansion in a container's command and args."""
    return [re.sub(r"\$\((\w+)\)", lambda g: variables[g.group(1)], w) for w in words]


@pytest.mark.parametrize("kind", ["JobSet", "PyTorchJob", "StatefulSet"])
@pytest.mark.parametrize("node", [0, 1])
def test_each_node_command_line_is_one_hvdrun_takes(kind, node, tmp_path):
    launcher = os.environ.get("HVDRUN_LAUNCHER")
    if not launcher:
        pytest.skip("HVDRUN_LAUNCHER is not set (ctest sets it to the built hvdrun)")
    # `hvdrun` on the PATH is the built one with --dry-run: it parses, plans and exits.
    wrapper = tmp_path / "bin" / "hvdrun"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{launcher}" --dry-run "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    c = containers(kind)[0]
    variables = {"JOB_COMPLETION_INDEX": str(node), "RANK": str(node),
                 "MASTER_ADDR": "train-master-0", "MASTER_PORT": "23456"}
    argv = [w.replace("/etc/hvdrun/secret", str(secret))
            for w in expand(c["command"] + c.get("args", []), variables)]
    env = dict(os.environ, PATH=f"{wrapper.parent}:{os.environ['PATH']}",
               HOSTNAME=f"train-{node}")
    env.pop("HVDRUN_JOB_SECRET", None)
    for e in c.get("env", []):
        if e["name"] == "HVDRUN_JOB_SECRET":
            env["HVDRUN_JOB_SECRET"] = SECRET
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("launcher: join;"), p.stdout
    assert len(lines) == 1 + 16, p.stdout  # 2 nodes of 8 ranks
