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

``horovod.__version__`` is the Horovod release whose PyTorch API sparsecomm.torch follows
(process sets, grouped allgather and reduce-scatter, ``alltoall``'s received splits), so
that code checking it (``LooseVersion(horovod.__version__) >= ...``) takes the calls it
has."""

__version__ = "0.28.1"
