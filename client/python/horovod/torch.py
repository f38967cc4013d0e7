"""horovod.torch: sparsecomm.torch under Horovod's name (see horovod/__init__.py).  The
module importing this name is sparsecomm.torch itself, and Horovod's module paths under
it (``from horovod.torch.mpi_ops import synchronize``) are sparsecomm.torch's."""
import sys

import sparsecomm.torch as _sct

for _name in [n for n in sys.modules if n.startswith("sparsecomm.torch.")]:
    sys.modules["horovod.torch." + _name[len("sparsecomm.torch."):]] = sys.modules[_name]
sys.modules[__name__] = _sct
