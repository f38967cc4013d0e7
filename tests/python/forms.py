"""The sparse result forms check shared by the Python workers (tests/python/worker_api.py
on the CPU, worker_gpu.py on a GPU): a tensor with two sparse dims summed by a scheme that
returns whole rows and by one that drops zero sums (partial rows)."""
import sparsecomm as sc
import torch


def forms_input(r):
    """Two sparse dims over [4, 5] with rows of 3: a row every rank shares, whose middle
    element cancels over an even number of ranks, and a row of the rank's own."""
    s = 1.0 if r % 2 == 0 else -1.0
    ind = torch.tensor([[0, r % 4], [0, 1 + r % 4]])
    return torch.sparse_coo_tensor(ind, torch.tensor([[1.0, s, 2.0], [3.0, 4.0, 5.0]]),
                                   (4, 5, 3))


def check_forms(close, device=torch.device("cpu")):
    """Sums forms_input of every rank on device, by agsparse and balanced_par; the result
    is a coalesced sparse tensor on device, sparse from the daemon with one trainer per
    node, dense (re-sparsified) with several."""
    want = sum(forms_input(r).to_dense() for r in range(sc.size()))
    # balanced_par drops elements whose sum is zero: partial rows come back
    for scheme in ("agsparse", "balanced_par"):
        res = sc.allreduce(forms_input(sc.rank()).to(device), name="forms." + scheme,
                           average=False, scheme=scheme)
        assert res.device == device, "result on %s, not %s" % (res.device, device)
        assert res.is_sparse and res.is_coalesced() and res.sparse_dim() == 2
        close(res.to_dense(), want)
        # which form the daemon answered in: sparse with one trainer per node
        e = sc._need().entries["forms." + scheme]
        dense = sc._lib.load().sc_tensor_result_nnz(e.ptr) == sc._lib.SC_RESULT_DENSE
        assert dense == (sc.local_size() > 1), "result dense=%s with %d trainer(s)/node" % (
            dense, sc.local_size())
