"""check_manifests.py: what yamllint cannot see in the example manifests (mpijob.yaml,
pytorchjob.yaml, jobset.yaml): the trainers learn the coordinator and the job secret where
the pods put them, with one trainer per GPU. Every manifest: the secret's path is where the
workers mount the Secret as a regular file (subPath) that only its owner reads, and
/dev/shm is memory-backed. An MPIJob: the launcher's mpirun passes the first worker by its
name in the job's service as MASTER_ADDR and starts slotsPerWorker x workers ranks. A
PyTorchJob: torchrun in a container named pytorch (the operator's rendezvous variables),
nprocPerNode trainers per pod, one per GPU. A JobSet: torchrun with --nnodes the indexed
Job's pods, the node rank its completion index and the master its first pod's DNS name.
Exits 1 naming the file and what is wrong."""
import shlex
import sys

import yaml


def pod_checks(pod, secret_path, wrong):
    """The Secret and /dev/shm of one pod spec, for the container that runs trainers."""
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    secret = [m for n, m in mounts.items() if "secret" in vols[n]]
    if len(secret) != 1 or secret[0]["mountPath"] != secret_path:
        wrong.append("SPARSECOMM_SECRET_FILE (%s) is not where the Secret is mounted"
                     % secret_path)
    elif "subPath" not in secret[0]:
        wrong.append("the Secret is mounted without subPath (a link the daemon refuses)")
    elif vols[secret[0]["name"]]["secret"].get("defaultMode", 0o644) & 0o077:
        wrong.append("the secret file is readable by group or others")
    if not any(v.get("emptyDir", {}).get("medium") == "Memory" and
               mounts.get(n, {}).get("mountPath") == "/dev/shm" for n, v in vols.items()):
        wrong.append("no memory-backed /dev/shm for the tensors")


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def gpus(container):
    return int(container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))


def check_mpijob(job, wrong):
    name, spec = job["metadata"]["name"], job["spec"]
    slots = spec["slotsPerWorker"]
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    worker_spec = spec["mpiReplicaSpecs"]["Worker"]
    worker = worker_spec["template"]["spec"]
    cmd = launcher["command"]
    xs = dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "-x")
    if cmd[0] != "mpirun" or cmd[cmd.index("-np") + 1] != str(slots * worker_spec["replicas"]):
        wrong.append("mpirun -np is not slotsPerWorker x workers")
    if xs.get("MASTER_ADDR") != "%s-worker-0.%s" % (name, name):
        wrong.append("MASTER_ADDR is not the first worker (%s)" % xs.get("MASTER_ADDR"))
    if gpus(worker["containers"][0]) not in (0, slots):
        wrong.append("slotsPerWorker is not the worker's GPU count")
    pod_checks(worker, xs.get("SPARSECOMM_SECRET_FILE"), wrong)


def check_pytorchjob(job, wrong):
    spec = job["spec"]
    nproc = int(spec["nprocPerNode"])
    for role, rs in spec["pytorchReplicaSpecs"].items():
        pod = rs["template"]["spec"]
        c = pod["containers"][0]
        if c["name"] != "pytorch":
            wrong.append("%s: the container is not named pytorch (the operator's)" % role)
        if c["command"][0] != "torchrun":
            wrong.append("%s: the trainers are not started by torchrun" % role)
        if gpus(c) not in (0, nproc):
            wrong.append("%s: nprocPerNode is not the pod's GPU count" % role)
        pod_checks(pod, env_of(c).get("SPARSECOMM_SECRET_FILE"), wrong)
    if spec["pytorchReplicaSpecs"].get("Master", {}).get("replicas") != 1:
        wrong.append("not exactly one Master (the coordinator's pod)")


def check_jobset(job, wrong):
    name = job["metadata"]["name"]
    if not job["spec"].get("network", {}).get("enableDNSHostnames", True):
        wrong.append("the pods have no DNS names (network.enableDNSHostnames)")
    rjob = job["spec"]["replicatedJobs"][0]
    jspec = rjob["template"]["spec"]
    pod = jspec["template"]["spec"]
    c = pod["containers"][0]
    args = shlex.split(c["command"][-1].replace("exec ", "", 1))
    opt = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--")}
    nodes = jspec["parallelism"] * rjob.get("replicas", 1)
    if jspec.get("completionMode") != "Indexed" or jspec["completions"] != jspec["parallelism"]:
        wrong.append("the Job is not indexed with one completion per pod")
    if args[0] != "torchrun" or opt.get("--nnodes") != str(nodes):
        wrong.append("torchrun --nnodes is not the pods' count (%d)" % nodes)
    if opt.get("--node-rank") != "$JOB_COMPLETION_INDEX":
        wrong.append("the node rank is not the pod's completion index")
    if opt.get("--master-addr") != "%s-%s-0-0.%s" % (name, rjob["name"], name):
        wrong.append("--master-addr is not the first pod (%s)" % opt.get("--master-addr"))
    if gpus(c) not in (0, int(opt.get("--nproc-per-node", -1))):
        wrong.append("--nproc-per-node is not the pod's GPU count")
    pod_checks(pod, env_of(c).get("SPARSECOMM_SECRET_FILE"), wrong)


KINDS = {("kubeflow.org/", "MPIJob"): check_mpijob,
         ("kubeflow.org/", "PyTorchJob"): check_pytorchjob,
         ("jobset.x-k8s.io/", "JobSet"): check_jobset}


def main(paths):
    bad = 0
    for path in paths:
        with open(path) as f:
            job = yaml.safe_load(f)
        wrong = []
        check = [fn for (api, kind), fn in KINDS.items()
                 if job["kind"] == kind and job["apiVersion"].startswith(api)]
        if not check:
            wrong.append("not a manifest this check knows (%s %s)"
                         % (job["apiVersion"], job["kind"]))
        else:
            try:
                check[0](job, wrong)
            except (KeyError, IndexError, ValueError, TypeError) as e:
                wrong.append("malformed: %r missing or wrong" % (e,))
        for w in wrong:
            print("%s: %s" % (path, w))
        bad += bool(wrong)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
