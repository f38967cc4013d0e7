/*
 * world_protocol.h: the version of the messages between daemons (PeerMsg: Join,
 * WorldInfo, plans; proto/sparsecomm.proto). A Join of another version is refused with
 * both versions named. It is separate from the library's SC_PROTOCOL_VERSION (trainers
 * and sparsectl <-> daemon), so a change between daemons does not make the library's
 * users upgrade. 2: Join and WorldInfo carry the transport's name and bootstrap data.
 * 3: heartbeats, Leave and the coordinator's NodeState for a node lost or left (a daemon
 * without them would be declared lost), and Reform when such a node joins again.
 * 4: barriers (BarrierEnter, BarrierDone) and joins (NodeJoin, JoinDone).
 * 5: alltoall (its operation word in plans, and its count matrix on the data plane).
 * 6: the dtype of TensorRequest and CacheEntry is a type word with the tensor's wire
 * format (coll/coll.h), and a 16-bit wire halves its ring's bytes.
 * 7: TensorRequest and CacheEntry carry the tensor's signature (TensorSig: its input's form
 * and the options its scheme depends on), an error Response the node ranks it answers, and
 * Join every configuration key marked the same on every node.
 * Also 7: SparDL's metadata round carries, after its histogram, one word of the previous
 * B-SAG's team count and h / L (scheme_spardl.c); Hierarchical Centralization's one word
 * per doubling level of the previous run's densification (scheme_hc.c).
 * 8: ReadyList tags the announcements that are members of a grouped operation (GroupTag):
 * the coordinator holds a group until all of it is ready on every rank (world/group.c).
 * 9: TensorRequest and CacheEntry carry the tensor's process set: only its member nodes
 * announce it, and the others skip its responses.
 * 10: Join and WorldInfo carry each daemon's host and cores (world/host.h), from which
 * every rank derives the nodes per core the schemes' choice is priced with.
 * 11: TensorSig carries the submission's shape (ndim, dims: util/shape.h), which every
 * rank must give alike.
 * 12: PeerMsg is numbered (seq, epoch) in a formed world, and WorldInfo names the
 * coordinator's peer pipe (world/pipe.h), which carries the messages once a node is on it.
 * 13: PeerMsg acknowledges the other direction's numbers (ack): a message is kept until
 * acknowledged and sent again when its pipe fails or its acknowledgement is late.
 * 14: MeshFailed (a node's data plane failed) and Reform's reason: the coordinator
 * re-forms the world, and every rank fails what was in flight with that one reason.
 * 15: NodeState.no_trainers: a node's last trainer ended its session cleanly, and the
 * coordinator forgets the late steps it kept for the node's trainers.
 * 16: Join carries the world the daemon leaves and its last message's number in it
 * (old_world, old_last_seq): the coordinator lets it in once it has read them all.
 * 17: fast mode (docs/design.md "Fast mode"): Plan.fast_begin, FastEnd, FastWaiting,
 * ReadyList.fast_left and fast_report, Join.fast_state, and a fast turn's words on the
 * data plane.
 * 18: Plan.fast_begin carries a cycle of 1 to 8 cache ids (turn t carries the
 * (t - 1) % n-th), and a fast turn's digest its place in the cycle.
 * 19: ReadyList.cached_held_us, how long each cached announcement waited on its node.
 */
#ifndef SC_WORLD_PROTOCOL_H
#define SC_WORLD_PROTOCOL_H

#define SCD_WORLD_PROTOCOL_VERSION 19

#endif
