"""horovod: an alias package, so that a Horovod PyTorch script runs unchanged on sparsecomm
(``import horovod.torch as hvd`` is ``import sparsecomm.torch as hvd``).  It lies beside
the sparsecomm package in client/python, so it is found only where that directory is on
the path (PYTHONPATH=client/python), and `make install` does not install it: a real
Horovod installed elsewhere stays what ``import horovod`` finds.

``horovod.torch`` and its modules (``horovod.torch.mpi_ops``, ``functions``,
``optimizer``, ``compression``, ``sync_batch_norm``, ``elastic``, ``elastic.sampler``,
``elastic.state``) are sparsecomm.torch's, and ``horovod.common.exceptions`` holds the
exceptions Horovod's elastic scripts catch (HorovodInternalError,
HostsUpdatedInterrupt).

``horovod.run`` (``horovod.runner.run``) is Horovod's Python launcher, running a function
on a new job's trainers through sparsecomm-run (horovod/runner/__init__.py).

``horovod.__version__`` is the Horovod release whose PyTorch API sparsecomm.torch follows
(process sets, grouped allgather and reduce-scatter, ``alltoall``'s received splits), so
that code checking it (``LooseVersion(horovod.__version__) >= ...``) takes the calls it
has."""

__version__ = "0.28.1"


def run(*args, **kwargs):
    """Horovod's ``horovod.run``: horovod.runner.run (horovod/runner/__init__.py)."""
    from horovod.runner import run as _run
    return _run(*args, **kwargs)
