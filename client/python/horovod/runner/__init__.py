"""horovod.runner.run (``horovod.run``): Horovod's Python launcher, through sparsecomm-run.

``horovod.run(fn, args=(), kwargs=None, np=2)`` runs ``fn(*args, **kwargs)`` on ``np``
trainers of a new job and returns their results in rank order, as Horovod's does (its
MNIST example's ``--num-proc`` path).  The function and its arguments (by cloudpickle
where it is installed, as Horovod's: a lambda or a notebook's function travels too) and
the caller's ``sys.path`` are pickled into a private directory; every trainer (``python -m
horovod.runner._task DIR`` under ``sparsecomm-run -np NP``) loads the caller's main
script as ``__mp_main__`` first, as multiprocessing's spawn does, so that a function
defined there unpickles, then calls it (the function calls ``hvd.init()`` itself) and
pickles its result, or its exception, for the caller.

The options map onto sparsecomm-run's as horovodrun's flags do (README.md, Coming from
Horovod): ``hosts``/``hostfile``, ``start_timeout``, ``ssh_port``/``ssh_identity_file``
(``--rsh-agent``), ``verbose``; ``disable_cache`` is accepted.  Turning on what has no
equivalent here (``use_gloo``/``use_mpi``, the elastic ``min_np``/``max_np``...,
``network_interface``, ``output_filename``, ``mpi_args``) raises ValueError naming it."""

import os
import pickle
import shlex
import shutil
import subprocess
import sys
import tempfile

from sparsecomm._colls import _pickler

_HERE = os.path.dirname(os.path.abspath(__file__))
_PYTHON_DIR = os.path.dirname(os.path.dirname(_HERE))  # the folder holding horovod/

# options with no equivalent here, refused when given (not None / False)
_REFUSED = {
    "use_gloo": "the daemons are the controller; no Gloo or MPI is used",
    "use_mpi": "the daemons are the controller; no Gloo or MPI is used",
    "mpi_args": "no MPI is used",
    "min_np": "a job's trainers are fixed when it starts (no elastic driver)",
    "max_np": "a job's trainers are fixed when it starts (no elastic driver)",
    "slots": "a job's trainers are fixed when it starts (no elastic driver)",
    "reset_limit": "a job's trainers are fixed when it starts (no elastic driver)",
    "cooldown_range": "a job's trainers are fixed when it starts (no elastic driver)",
    "network_interface": "the daemons' data plane binds their setting data_addr",
    "output_filename": "every line is printed with its \"[rank] \" prefix",
}


def _launcher():
    """$SPARSECOMM_RUN, else the build tree's next to this package, else PATH's."""
    env = os.environ.get("SPARSECOMM_RUN")
    if env:
        return env
    built = os.path.normpath(os.path.join(_PYTHON_DIR, "..", "..", "build", "bin",
                                          "sparsecomm-run"))
    if os.access(built, os.X_OK):
        return built
    found = shutil.which("sparsecomm-run")
    if found:
        return found
    raise FileNotFoundError("horovod.run: sparsecomm-run not found ($SPARSECOMM_RUN, %s "
                            "or PATH)" % built)


def _command(np, hosts, hostfile, start_timeout, ssh_port, ssh_identity_file, verbose):
    if not isinstance(np, int) or np < 1:
        raise ValueError("horovod.run: np must be a positive number of processes, not %r"
                         % (np,))
    cmd = [_launcher(), "-np", str(np)]
    if hosts and hostfile:
        raise ValueError("horovod.run: give hosts or hostfile, not both")
    if hosts:
        cmd += ["-H", hosts]
    if hostfile:
        cmd += ["--hostfile", hostfile]
    if start_timeout is not None:
        cmd += ["--start-timeout", str(int(start_timeout))]
    if ssh_port is not None or ssh_identity_file is not None:
        agent = ["ssh"] + (["-p", str(int(ssh_port))] if ssh_port is not None else []) + \
            (["-i", ssh_identity_file] if ssh_identity_file is not None else [])
        cmd += ["--rsh-agent", " ".join(shlex.quote(a) for a in agent)]
    if verbose:
        cmd += ["--verbose"]
    return cmd


def run(func, args=(), kwargs=None, np=1, min_np=None, max_np=None, slots=None,
        reset_limit=None, cooldown_range=None, hosts=None, hostfile=None,
        start_timeout=None, ssh_port=None, ssh_identity_file=None, disable_cache=None,
        output_filename=None, verbose=None, use_gloo=None, use_mpi=None, mpi_args=None,
        network_interface=None, executable=None):
    """Runs ``func(*args, **kwargs)`` on ``np`` trainers; returns their results as a list
    in rank order.  A trainer that fails raises RuntimeError here (with the exception a
    trainer's function raised, when one did)."""
    given = dict(use_gloo=use_gloo, use_mpi=use_mpi, mpi_args=mpi_args, min_np=min_np,
                 max_np=max_np, slots=slots, reset_limit=reset_limit,
                 cooldown_range=cooldown_range, network_interface=network_interface,
                 output_filename=output_filename)
    for key, value in given.items():
        if value is not None and value is not False:
            raise ValueError("horovod.run: %s has no equivalent here: %s" %
                             (key, _REFUSED[key]))
    cmd = _command(np, hosts, hostfile, start_timeout, ssh_port, ssh_identity_file,
                   verbose)
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    # plain data first (what the trainer sets up), then what may need the main script
    where = {"sys_path": list(sys.path), "main": os.path.abspath(main) if main else None}
    job = {"func": func, "args": tuple(args), "kwargs": dict(kwargs or {})}
    with tempfile.TemporaryDirectory(prefix="horovod-run-") as tmp:
        with open(os.path.join(tmp, "job.pkl"), "wb") as f:
            pickle.dump(where, f)
            _pickler().dump(job, f)  # cloudpickle where installed, as Horovod's
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [_PYTHON_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        cmd += ["--", executable or sys.executable, "-m", "horovod.runner._task", tmp]
        rc = subprocess.call(cmd, env=env)
        results, failures = [], []
        for rank in range(np):
            path = os.path.join(tmp, "result.%d" % rank)
            if not os.path.exists(path):
                failures.append("rank %d returned no result" % rank)
                continue
            with open(path, "rb") as f:
                ok, value = pickle.load(f)
            if ok:
                results.append(value)
            else:
                failures.append("rank %d raised %s" % (rank, value))
        if rc != 0 or failures:
            raise RuntimeError("horovod.run: %s exited with status %d%s" % (
                os.path.basename(cmd[0]), rc, ": " + "; ".join(failures) if failures else ""))
        return results
