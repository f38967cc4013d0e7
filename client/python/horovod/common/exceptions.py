"""horovod.common.exceptions: the exceptions Horovod's elastic scripts catch, which are
sparsecomm's (a failed collective's HorovodInternalError, the elastic
HostsUpdatedInterrupt)."""
from sparsecomm import HorovodInternalError  # noqa: F401
from sparsecomm._elastic import HostsUpdatedInterrupt  # noqa: F401
