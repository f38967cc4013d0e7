"""check_manifests.py: what yamllint cannot see in examples/kubernetes/mpijob.yaml: the
launcher's mpirun passes the coordinator (MASTER_ADDR, the first worker by its name in
the job's service) and the job secret at the path where the workers mount the Secret as
a regular file (subPath), with one rank per worker slot. Exits 1 naming what is wrong."""
import sys

import yaml


def main(path):
    with open(path) as f:
        job = yaml.safe_load(f)
    name = job["metadata"]["name"]
    spec = job["spec"]
    slots = spec["slotsPerWorker"]
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    worker_spec = spec["mpiReplicaSpecs"]["Worker"]
    worker = worker_spec["template"]["spec"]
    cmd = launcher["command"]
    xs = dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "-x")
    wrong = []
    if job["kind"] != "MPIJob" or not job["apiVersion"].startswith("kubeflow.org/"):
        wrong.append("not a kubeflow.org MPIJob")
    if cmd[0] != "mpirun" or cmd[cmd.index("-np") + 1] != str(slots * worker_spec["replicas"]):
        wrong.append("mpirun -np is not slotsPerWorker x workers")
    if xs.get("MASTER_ADDR") != "%s-worker-0.%s" % (name, name):
        wrong.append("MASTER_ADDR is not the first worker (%s)" % xs.get("MASTER_ADDR"))
    mounts = {m["name"]: m for m in worker["containers"][0]["volumeMounts"]}
    vols = {v["name"]: v for v in worker["volumes"]}
    secret = [m for n, m in mounts.items() if "secret" in vols[n]]
    if len(secret) != 1 or secret[0]["mountPath"] != xs.get("SPARSECOMM_SECRET_FILE"):
        wrong.append("SPARSECOMM_SECRET_FILE is not where the Secret is mounted")
    elif "subPath" not in secret[0]:
        wrong.append("the Secret is mounted without subPath (a link the daemon refuses)")
    elif vols[secret[0]["name"]]["secret"].get("defaultMode", 0o644) & 0o077:
        wrong.append("the secret file is readable by group or others")
    if not any(v.get("emptyDir", {}).get("medium") == "Memory" and
               mounts.get(n, {}).get("mountPath") == "/dev/shm" for n, v in vols.items()):
        wrong.append("no memory-backed /dev/shm for the tensors")
    for w in wrong:
        print("%s: %s" % (path, w))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
