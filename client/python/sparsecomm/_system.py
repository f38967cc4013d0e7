"""Horovod's questions about the build (mpi_built, nccl_built, ...) and its timeline calls,
answered for sparsecomm.

sparsecomm has no MPI, Gloo, oneCCL, DDL or ROCm inside: its daemons agree among
themselves (the negotiation) and move bytes over their own transports, so those queries
answer False.  nccl_built() and cuda_built() ask the node's daemon what it has built in
(sc_daemon_built, told at connection): its nccl transport (nccl_built() is Horovod's int,
the version code of the NCCL library the daemons load), and the cuda device where it
serves GPU tensors.  start_timeline() and stop_timeline() set the daemons' timeline_file
(the same as ``sparsectl timeline start FILE`` / ``stop``)."""

import ctypes
import os

from . import _lib


def _built():
    """What the node's daemon has built in and usable; before init(), as Horovod's
    nccl_built() and cuda_built() answer without a job, what the library's build has."""
    from . import _ctx
    lib = _lib.load()
    got = lib.sc_daemon_built(_ctx.client) if _ctx is not None else lib.sc_built()
    return set((got or b"").decode().split())


def mpi_built():
    """False: sparsecomm uses no MPI (sparsecomm-run, or mpirun only as a launcher)."""
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    """Raises ValueError, as Horovod's does where MPI is not enabled (a job under Gloo):
    no MPI is used here, so there is no MPI threading to mix mpi4py with."""
    raise ValueError("sparsecomm uses no MPI (mpi_enabled() is False), so MPI "
                     "multi-threading is not available; mpi4py cannot share its "
                     "communicator")


def gloo_built():
    """False: the daemons' own negotiation replaces Horovod's Gloo controller."""
    return False


def gloo_enabled():
    return False


def ccl_built():
    return False


def ddl_built():
    return False


def rocm_built():
    return False


def nccl_built():
    """As Horovod's, an int: the NCCL version code (ncclGetVersion's, 21903 for 2.19.3)
    of the libnccl.so.2 the daemons load, when the node's daemon has its nccl transport
    built in (GPU buffers between daemons over NCCL; before init(), when the library's
    build has it); 0 when it has not, or when no libnccl.so.2 loads here (the daemons'
    search: $SPARSECOMM_NCCL_LIB alone when set, else the loader's, then the nvidia-nccl
    wheel of this Python), since the daemons then run without NCCL."""
    return _nccl_version() if "nccl" in _built() else 0


_nccl_code = None


def _nccl_version():
    """ncclGetVersion of the first libnccl.so.2 that loads, 0 when none does
    (remembered: the library does not change under a running process)."""
    global _nccl_code
    if _nccl_code is None:
        _nccl_code = 0
        for path in _nccl_candidates():
            try:
                lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_LOCAL", 0))
                code = ctypes.c_int(0)
                if lib.ncclGetVersion(ctypes.byref(code)) == 0 and code.value > 0:
                    _nccl_code = int(code.value)
                    break
            except (OSError, AttributeError):
                continue
    return _nccl_code


def _nccl_candidates():
    env = os.environ.get("SPARSECOMM_NCCL_LIB")
    if env:
        return [env]
    paths = ["libnccl.so.2"]
    try:
        import importlib.util
        spec = importlib.util.find_spec("nvidia.nccl")
        for d in (spec.submodule_search_locations or []) if spec else []:
            paths.append(os.path.join(d, "lib", "libnccl.so.2"))
    except (ImportError, ValueError):
        pass
    return paths


def cuda_built():
    """True when the node's daemon serves CUDA tensors (its CUDA device library loads and
    its ``device`` setting is not cpu); before init(), when the library's build has its
    CUDA device library."""
    return "cuda" in _built()


def start_timeline(file_path, mark_cycles=False):
    """Horovod's start_timeline: every daemon of the job writes a Chrome-trace timeline
    to ``file_path`` (made absolute here; with several daemons each file gets the node's
    rank, see the README's Timeline).  Sets the setting timeline_file, which only the
    daemons' user (or root) may change, as trainers normally run.  Rank 0 sets it for
    the job; on the other ranks this returns at once.  ``mark_cycles`` is refused: the
    daemons' timeline has no cycle markers."""
    if mark_cycles:
        raise NotImplementedError("start_timeline: mark_cycles is not supported (the "
                                  "daemons' timeline has no cycle markers)")
    path = os.path.abspath(os.fspath(file_path))
    if not path or path.endswith(os.sep):
        raise ValueError("start_timeline: %r is not a file name" % (file_path,))
    _set_timeline(path)


def stop_timeline():
    """Horovod's stop_timeline: the daemons close their timeline files."""
    _set_timeline("")


def _set_timeline(value):
    from . import _error, _need
    c = _need()
    if c.rank != 0:
        return
    st = _lib.load().sc_config_set(c.client, b"timeline_file", os.fsencode(value))
    if st != _lib.SC_OK:
        raise _error(st, "%s the timeline" % ("starting" if value else "stopping"))
