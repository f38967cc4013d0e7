#!/usr/bin/python3
"""Run under sparsecomm-run (not part of the suite): what a new shape under a name costs.
Times allreduces of one name at a fixed shape, then with the shape changing every call
(each call re-registers the buffer: sc_tensor_release, then sc_register_ex), and prints
the calls per second of both and the difference per call, on rank 0."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import torch  # noqa: E402

import sparsecomm.torch as hvd  # noqa: E402

torch.set_num_threads(1)
hvd.init()
N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
BASE = int(sys.argv[2]) if len(sys.argv) > 2 else 4096


def run(shape_of):
    hvd.allreduce(torch.ones(shape_of(0)), name="bench.warm", op=hvd.Sum)
    hvd.barrier()
    t0 = time.perf_counter()
    for i in range(N):
        hvd.allreduce(torch.ones(shape_of(i)), name="bench", op=hvd.Sum)
    return (time.perf_counter() - t0) / N


fixed = run(lambda i: BASE)
varying = run(lambda i: BASE + (i % 2) * 64)  # a new shape every call
if hvd.rank() == 0:
    print("reshape: %d floats, fixed shape %.1f us/call (%.0f calls/s), shape changing "
          "every call %.1f us/call (%.0f calls/s): one re-registration costs %.1f us" %
          (BASE, fixed * 1e6, 1 / fixed, varying * 1e6, 1 / varying,
           (varying - fixed) * 1e6), flush=True)
hvd.shutdown()
