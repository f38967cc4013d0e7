"""Bounded registrations: which of the package's registered buffers it lets go, and when
(the rule is in the package's module doc, "Unnamed operations" and "Named registrations
stay bounded").

Every registration is a shared-memory buffer the node's daemon holds, and the node holds
at most ``max_registrations`` of them for all its trainers together (and /dev/shm only so
many bytes), so a buffer registered per call, as Horovod code that names every call makes
(``name=f"loss.{step}"``), must be let go again.  Two kinds are let go here, least
recently used first, each only while nothing uses it:
 - unnamed classes (``<kind>.noname.C.S``): past _UNNAMED_CLASSES classes, the least
   recently used class with no slot in flight;
 - named registrations made by a collective's ``name=``: past _NAMED_MAX of them, and when
   a registration fails for room (SC_ERR_LIMIT, SC_ERR_NOMEM), a batch of them.
Registrations made by :func:`sparsecomm.register`, or inside :func:`keeping` (a
DistributedOptimizer's gradients, the DDP hook's buffers), are kept: a model's parameters
are each reduced every step, and releasing them for room would register them again at
the next one.

Letting a name go on one trainer and not on another is safe: a name a node let go and
registers again takes up its negotiation where it was (every daemon keeps the name's
cached forms and its buffers' state, whichever nodes hold it), while the nodes that kept
it go on; a trainer that
let a name go while another trainer of its node kept it may register it again with
another shape (the daemon remembers it let go of it)."""

import contextlib
import sys
import threading

from . import (DeviceKind, SparsecommError, _entry_locked, _form, _formless, _key,
               _release_locked, _reserved_error)

# the package: its caps (_NAMED_MAX, _UNNAMED_CLASSES) are read at each use
_pkg = sys.modules[__name__.rpartition(".")[0]]

# a batch released when a registration fails for room: an eighth of the named
# registrations held, at least this many
_ROOM_BATCH_MIN = 16

_keeping = threading.local()


@contextlib.contextmanager
def keeping():
    """The registrations this thread makes or uses inside are kept (never released for
    room): a DistributedOptimizer's gradients and the DDP hook's buffers."""
    prev = getattr(_keeping, "on", False)
    _keeping.on = True
    try:
        yield
    finally:
        _keeping.on = prev


def keeping_now():
    return getattr(_keeping, "on", False)


def _idle(e):
    """Whether e may be released: no operation in flight, its last handle waited for (or
    dropped), and for a GPU buffer no copy out of it still queued on a stream."""
    if e.inflight or e.open is not None:
        return False
    ev = getattr(e, "last_read", None)
    return ev is None or bool(ev.query())


def named_use(c, e, keep):
    """Records a use of e (held: c.lock): a named registration that may be released moves
    to the most recently used end; one kept (keep, or kept before) leaves the order."""
    if e.unnamed:
        return
    if keep or e.kept:
        e.kept = True
        if c.named.get(e.key) is e:
            del c.named[e.key]
        return
    if c.named.get(e.key) is e:
        c.named.move_to_end(e.key)
    else:
        c.named[e.key] = e


def _release_idle(c, n, over=0):
    """Releases up to n idle named registrations, least recently used first, leaving at
    least ``over`` (held: c.lock); how many it released.  Only the oldest are looked at
    (a name per step past the cap costs one release, not a pass over them all).  A
    release the daemon refuses stops it (the registration stays, and the caller's own
    call says what is wrong)."""
    want = min(n, len(c.named) - over)
    victims = []
    for e in c.named.values():
        if len(victims) >= want:
            break
        if _idle(e):
            victims.append(e)
    done = 0
    for e in victims:
        try:
            _release_locked(c, e)
        except SparsecommError:
            break
        done += 1
    return done


def named_trim(c):
    """Before a new named registration (held: c.lock): past _NAMED_MAX - 1, the least
    recently used idle ones are released, so that the new one makes at most _NAMED_MAX
    (more only while every older one is in use)."""
    cap = _pkg._NAMED_MAX
    if len(c.named) >= cap:
        _release_idle(c, len(c.named), cap - 1)


def named_room(c):
    """A registration failed for room (held: c.lock): releases a batch of idle named
    registrations, least recently used first; how many (0: none could go)."""
    return _release_idle(c, max(_ROOM_BATCH_MIN, len(c.named) // 8))


# ---- unnamed operations --------------------------------------------------------------

def _unnamed_evict(c):
    """Releases the buffers of the least recently used unnamed class whose operations have
    all completed, once more than _UNNAMED_CLASSES classes are held: unnamed calls of
    ever new shapes keep a bounded number of registrations."""
    if len(c.unnamed) < _pkg._UNNAMED_CLASSES:
        return
    for cls in sorted(c.unnamed, key=lambda k: c.unnamed_used[k]):
        slots = c.unnamed[cls]
        if any(e.inflight for e in slots):
            continue
        for e in slots:
            _release_locked(c, e)
        del c.unnamed[cls], c.unnamed_ids[cls], c.unnamed_used[cls]
        return


def unnamed_entry(c, kind, dtype, numel, key, coo_capacity, device=None, pset=0):
    """A free buffer for an unnamed operation, already claimed (the rule is in the module
    doc).  Classes are numbered per process set: the members of a set make the same calls
    in it, whatever else each does in other sets.  A class is neither the tensor's element
    count nor its dtype: a rank whose tensor's shape or dtype differs from the others'
    takes the buffer of the same name, registered anew, and the daemons fail the call on
    every rank as a mismatch (in classes of their own, the ranks' names would never meet:
    a stall until stall_timeout_ms)."""
    device = device or (DeviceKind.CPU, 0)
    cls = (kind, _formless(key), int(coo_capacity), device, pset)
    with c.lock:
        slots = c.unnamed.get(cls)
        c.unnamed_calls += 1
        if slots is None:
            _unnamed_evict(c)
            slots = c.unnamed[cls] = []
            c.unnamed_ids[cls] = c.unnamed_next.get(pset, 0)
            c.unnamed_next[pset] = c.unnamed_ids[cls] + 1
        c.unnamed_used[cls] = c.unnamed_calls
        for i, e in enumerate(slots):
            if not e.inflight:
                if (e.numel != numel or e.dtype != dtype or _form(e.opts_key) != _form(key)
                        or c.entries.get(e.key) is not e):  # another shape, dtype, wire or
                    # element type, or its registration anew was refused (it is released)
                    e = slots[i] = _entry_locked(c, e.name, dtype, numel, key,
                                                 coo_capacity, device, pset)
                    e.unnamed = True
                e.inflight = True
                return e
        name = "%s.noname.%d.%d" % (kind, c.unnamed_ids[cls], len(slots))
        if _key(name, pset) in c.entries:
            raise _reserved_error(name)
        e = _entry_locked(c, name, dtype, numel, key, coo_capacity, device, pset)
        e.unnamed = True
        slots.append(e)
        e.inflight = True
        return e

