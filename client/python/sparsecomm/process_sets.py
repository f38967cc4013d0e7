"""Horovod's process sets in the sparsecomm binding: collectives among a subset of the
trainers (sparsecomm.h, "Process sets").

    even = hvd.ProcessSet([0, 2])
    hvd.init(process_sets=[even])            # added in order after the connection
    if even.included():
        hvd.allreduce(t, name="w", process_set=even)   # among ranks 0 and 2 only

A :class:`ProcessSet` holds its members' global ranks, ascending (the order of the set's
ranks: ``ps.ranks[i]`` is set rank i), and, once added, its ``process_set_id`` (1, 2, ...
in the order of additions; :data:`global_process_set`, every trainer, is 0).  Adding and
removing a set is collective: every trainer of the job calls it, with the same ranks, in
the same order (sc_process_set_add, sc_process_set_remove); trainers that disagree all
fail naming the ranks that differ.  After init, :func:`add_process_set` and
:func:`remove_process_set` need dynamic process sets, as Horovod's do:
$HOROVOD_DYNAMIC_PROCESS_SETS or $SPARSECOMM_DYNAMIC_PROCESS_SETS set to 1 (read at the
call), or ``init(process_sets="dynamic")``; otherwise they raise ValueError.

Every collective takes ``process_set=`` (default the global set).  A tensor belongs to
one set and a name is a name within its set: the binding keys its registrations by
(name, set id) and registers them with sc_tensor_opts_t.process_set.  Ranks given to a
collective (a broadcast's root_rank) are global ranks, as Horovod's are (it maps them to
the set's numbering), and must be members; allgather, alltoall and reduce-scatter results are in set-rank order,
and averages divide by the set's size.  A trainer that is not a member of the set, or a
set not added (or removed), is refused before anything is submitted, with
:class:`ProcessSetError` (a ValueError, as Horovod raises, and a SparsecommError with
SC_ERR_INVALID) naming the operation, the tensor, the set and the rank.  A barrier in a
set is a one-element sum allreduce among its members (the library's barrier is the whole
job's); join is the whole job's only.
"""

import ctypes
import numbers
import os

from . import _lib
from . import SparsecommError

import sparsecomm as _sc


class ProcessSetError(SparsecommError, ValueError):
    """A process set that cannot be used where it was given: the calling trainer is not a
    member, the set was never added or has been removed, or the library refused its
    ranks.  ``except ValueError`` catches it as it catches Horovod's."""

    def __init__(self, message, tensor=None, status=_lib.SC_ERR_INVALID):
        super().__init__(status, message, tensor)


class ProcessSet:
    """A set of trainers that run collectives together (Horovod's ProcessSet): made from a
    list of global ranks (kept ascending), then given to init(process_sets=[...]) or
    add_process_set().  ``process_set_id`` is None until it has been added."""

    process_set_id = None
    ranks = None

    def __init__(self, ranks):
        if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
            raise ValueError("ProcessSet is made from a list of trainer ranks, not %r (an "
                             "MPI communicator is not supported)" % (ranks,))
        rs = list(ranks)
        bad = [r for r in rs if isinstance(r, bool) or not isinstance(r, numbers.Integral)]
        if bad:
            raise ValueError("ProcessSet ranks must be integers, not %r" % (bad[0],))
        self.ranks = sorted(int(r) for r in rs)

    def invalidate(self):
        """Forgets the id and ranks (the set was removed)."""
        self.process_set_id = None
        self.ranks = None

    def size(self):
        """The number of trainers in the set (None before init())."""
        c = _sc._ctx
        if c is None:
            return None
        pid = _known_id(c, self, "size()")
        if pid == 0:
            return c.size
        n = _lib.load().sc_process_set_size(c.client, pid)
        if n < 0:
            raise ProcessSetError("process set %d is unknown to the library" % pid)
        return n

    def rank(self):
        """This trainer's rank within the set (None before init()); a ValueError for a
        trainer that is not a member, as Horovod's."""
        c = _sc._ctx
        if c is None:
            return None
        pid = _known_id(c, self, "rank()")
        if pid == 0:
            return c.rank
        r = _lib.load().sc_process_set_rank(c.client, pid)
        if r < 0:
            raise ProcessSetError("rank %d is not a member of process set %d (ranks %s)" %
                                  (c.rank, pid, c.psets[pid]))
        return r

    def included(self):
        """Whether this trainer is a member of the set (None before init())."""
        c = _sc._ctx
        if c is None:
            return None
        pid = _known_id(c, self, "included()")
        return pid == 0 or c.rank in c.psets[pid]

    def __repr__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)

    __str__ = __repr__


global_process_set = ProcessSet([])
global_process_set.process_set_id = _lib.SC_PROCESS_SET_GLOBAL

_by_id = {0: [global_process_set]}  # id -> the ProcessSet objects added under it


class Scope:
    """Where an operation runs: the set's id, its members' global ranks in set-rank
    order, this trainer's rank in it and its size."""

    __slots__ = ("id", "ranks", "rank", "size")

    def __init__(self, pid, ranks, rank, size):
        self.id, self.ranks, self.rank, self.size = pid, ranks, rank, size

    def root(self, root_rank, what):
        """A collective's root: ``root_rank``, a global rank, as Horovod's (which maps it
        to the set's own numbering), checked to be a member (a ValueError otherwise)."""
        r = int(root_rank)
        if r not in self.ranks:
            raise ValueError("%s: root_rank %d is not a member of %s (its ranks: %s)" %
                             (what, r, self.describe(), _span(self.ranks)))
        return r

    def describe(self):
        return "the job" if self.id == 0 else "process set %d" % self.id


def _span(ranks):
    """A set's ranks for a message: "0 to N" for the whole job's."""
    if isinstance(ranks, range):
        return "0 to %d" % (len(ranks) - 1)
    return ", ".join(map(str, ranks))


def _known_id(c, ps, what):
    """The id of an added set known to this session, else ProcessSetError."""
    pid = ps.process_set_id
    if pid is None or pid not in c.psets:
        raise ProcessSetError("%s of %s: the process set has not been added (or has been "
                              "removed); add it with init(process_sets=[...]) or "
                              "add_process_set()" % (what, ps))
    return pid


def scope(c, process_set, what, tensor=None):
    """The Scope of an operation ``what`` (of ``tensor``) given ``process_set`` (a
    ProcessSet, an id, or None: the job); a set not added, or one this trainer is not a
    member of, raises ProcessSetError naming them."""
    if process_set is None:
        return Scope(0, range(c.size), c.rank, c.size)
    if isinstance(process_set, ProcessSet):
        pid = _known_id(c, process_set, what)
    elif isinstance(process_set, numbers.Integral) and not isinstance(process_set, bool):
        pid = int(process_set)
        if pid not in c.psets:
            raise ProcessSetError("%s: no process set %d has been added" % (what, pid), tensor)
    else:
        raise TypeError("%s: process_set must be a ProcessSet, not %r" % (what, process_set))
    if pid == 0:
        return Scope(0, range(c.size), c.rank, c.size)
    ranks = c.psets[pid]
    if c.rank not in ranks:
        raise ProcessSetError("%s%s: rank %d is not a member of process set %d (ranks %s)" %
                              (what, "" if tensor is None else " of tensor '%s'" % tensor,
                               c.rank, pid, ranks), tensor)
    return Scope(pid, ranks, ranks.index(c.rank), len(ranks))


def _need_library(what):
    if not _lib.has("sc_process_set_add"):
        raise SparsecommError(_lib.SC_ERR_UNSUPPORTED, "%s: the loaded libsparseclient (%s) "
                              "has no process sets (sc_process_set_add)" %
                              (what, _lib.library_path()))


def _set_error(st, what):
    """The error of a refused add or remove: bad or disagreeing input is a ValueError too
    (ProcessSetError), anything else a SparsecommError."""
    e = _sc._error(st, what)
    if st in (_lib.SC_ERR_INVALID, _lib.SC_ERR_MISMATCH):
        return ProcessSetError(e.message, status=st)
    return e


def _timeout_ms(c):
    return int(c.timeout_s * 1000)


def _add(c, ps):
    """Adds ps with every other trainer (sc_process_set_add) and records it."""
    what = "adding process set %s" % (ps.ranks,)
    _need_library(what)
    if ps.process_set_id is not None:
        raise ValueError("%s: it was already added, as process set %d" %
                         (what, ps.process_set_id))
    lib = _lib.load()
    arr = (ctypes.c_int * max(len(ps.ranks), 1))(*ps.ranks)
    pid = ctypes.c_int(-1)
    st = lib.sc_process_set_add(c.client, arr, len(ps.ranks), _timeout_ms(c),
                                ctypes.byref(pid))
    if st != _lib.SC_OK:
        raise _set_error(st, what)
    n = lib.sc_process_set_size(c.client, pid.value)
    got = (ctypes.c_int * max(n, 1))()
    if n < 1 or lib.sc_process_set_ranks(c.client, pid.value, got, n) != n:
        raise SparsecommError(_lib.SC_ERR_PROTOCOL, "%s: the library gives no ranks for the "
                              "new process set %d" % (what, pid.value))
    ps.ranks = list(got[:n])
    ps.process_set_id = pid.value
    c.psets[pid.value] = ps.ranks
    _by_id.setdefault(pid.value, []).append(ps)
    return ps


def _dynamic(c, what):
    if c.dynamic:
        return
    for var in ("HOROVOD_DYNAMIC_PROCESS_SETS", "SPARSECOMM_DYNAMIC_PROCESS_SETS"):
        v = os.environ.get(var, "").strip().lower()
        if v in ("1", "true", "yes", "on") or (v.isdigit() and int(v) > 0):
            return
    raise ProcessSetError("Set HOROVOD_DYNAMIC_PROCESS_SETS=1 (or SPARSECOMM_DYNAMIC_PROCESS_SETS=1"
                     ", or init(process_sets=\"dynamic\")) to allow %s process sets after "
                     "initialization" % what)


def setup(c, process_sets):
    """init()'s part: the global set's ranks, then ``process_sets`` added in order
    ("dynamic": none, and adding and removing later is allowed)."""
    global_process_set.ranks = list(range(c.size))
    if isinstance(process_sets, str):
        if process_sets != "dynamic":
            raise ValueError("init: process_sets is a list of ProcessSet or \"dynamic\", not "
                             "%r" % process_sets)
        c.dynamic = True
        return
    for ps in process_sets or ():
        _add(c, ps if isinstance(ps, ProcessSet) else ProcessSet(ps))


def forget(c):
    """shutdown()'s part: the sets added in this session are gone with it."""
    for pid in [p for p in _by_id if p != 0]:
        for ps in _by_id.pop(pid):
            ps.invalidate()


def add_process_set(process_set):
    """Adds a process set (a ProcessSet or a list of ranks) after init, with every other
    trainer; returns the ProcessSet, its id set.  Needs dynamic process sets (see the module
    doc).  Trainers that give different ranks all raise ProcessSetError (SC_ERR_MISMATCH,
    naming the ranks that differ), and so do invalid ranks (out of range, repeated, none)
    and the ranks of a set already added (SC_ERR_INVALID)."""
    c = _sc._need()
    _dynamic(c, "adding")
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    return _add(c, ps)


def remove_process_set(process_set):
    """Removes an added process set with every other trainer (sc_process_set_remove) and
    returns True; False for the global set and for a set not added (Horovod's answers).  Its
    operations still in flight fail with SC_ERR_ABORTED naming it, its tensors are released,
    and every ProcessSet object of it is invalidated.  Needs dynamic process sets."""
    c = _sc._need()
    _dynamic(c, "removing")
    pid = process_set.process_set_id if isinstance(process_set, ProcessSet) else process_set
    if pid is None or pid == 0 or pid not in c.psets:
        return False
    _need_library("removing process set %d" % pid)
    st = _lib.load().sc_process_set_remove(c.client, int(pid), _timeout_ms(c))
    if st == _lib.SC_ERR_NOT_FOUND:
        return False
    if st != _lib.SC_OK:
        raise _set_error(st, "removing process set %d" % pid)
    del c.psets[pid]
    for ps in _by_id.pop(pid, []):
        ps.invalidate()
    if isinstance(process_set, ProcessSet):
        process_set.invalidate()
    _sc._forget_set(c, pid)
    return True


def process_set_by_id(process_set_id):
    """The ProcessSet added under ``process_set_id`` (ValueError when none is)."""
    if process_set_id not in _by_id:
        raise ValueError("no process set with id %s has been added" % (process_set_id,))
    return _by_id[process_set_id][0]


def process_sets():
    """The added process sets, the global one first, by id."""
    return [_by_id[k][0] for k in sorted(_by_id)]
