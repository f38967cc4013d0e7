"""Horovod's questions about the build (mpi_built, nccl_built, ...) and its timeline calls,
answered for sparsecomm.

sparsecomm has no MPI, Gloo, oneCCL, DDL or ROCm inside: its daemons agree among
themselves (the negotiation) and move bytes over their own transports, so those queries
answer False.  nccl_built() and cuda_built() ask the node's daemon what it has built in
(sc_daemon_built, told at connection): its nccl transport, and the cuda device where it
serves GPU tensors.  start_timeline() and stop_timeline() set the daemons' timeline_file
(the same as ``sparsectl timeline start FILE`` / ``stop``)."""

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
    return False


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
    """True when the node's daemon has its nccl transport built in (GPU buffers between
    daemons over NCCL; libnccl.so.2 is loaded when a world uses it); before init(), when
    the library's build has it."""
    return "nccl" in _built()


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
