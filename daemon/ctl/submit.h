/*
 * submit.h: a trainer's submit channel, the direct way for its requests to reach the
 * daemon's loop. On the control socket a request takes four thread wake-ups before the
 * loop sees it (the trainer's thread, the library's I/O thread, ZeroMQ's I/O thread on
 * each side); on this channel one: the trainer's own thread writes it on a SOCK_SEQPACKET
 * Unix socket that the loop polls.
 *
 * A trainer asks for it in its hello (Hello.submit_channel) and gets the socket's path and
 * a random token (HelloReply.submit_path, submit_token). It connects, sends the token as
 * its first message, and the connection is bound to its session only if the token is the
 * session's (compared in constant time) and the connection's SO_PEERCRED (uid and pid) are
 * the session's. At its accept a connection waits for its token only if its SO_PEERCRED
 * are those of a session offered a channel and not bound yet; anything else is closed at
 * once, not counted, with a rate-limited warning naming the pid and uid, as is a wrong
 * token or a connection that sends no token within SCD_SUBMIT_TOKEN_MS. The daemon
 * acknowledges a binding with one message of one byte. One channel per session; at most
 * SCD_SUBMIT_MAX_PENDING connections wait for their token at a time, and at most
 * SCD_SUBMIT_ACCEPT_BUDGET are accepted per turn of the loop; out of descriptors, the
 * listener rests until the next tick.
 *
 * Order: once bound, every request of the session comes over the channel (one socket, one
 * order); one that comes over the control socket instead drops the session, as does a
 * message that is not a ClientMsg, is over SCD_CTL_MSG_MAX_BYTES or has no bytes at all
 * (told apart from a hang-up by the socket's POLLHUP/POLLRDHUP). A SubmitBatch message
 * (the hello's reply says submit_batch) carries several collectives' requests, served in
 * order (ctl.c, serve_batch). Replies, completions
 * and errors go back over the control socket as before. The channel's hang-up ends the
 * session as the control connection's does.
 */
#ifndef SCD_CTL_SUBMIT_H
#define SCD_CTL_SUBMIT_H

#include "ctl/ctl_int.h"

#define SCD_SUBMIT_TOKEN_MS    2000
#define SCD_SUBMIT_MAX_PENDING 16
#define SCD_SUBMIT_READ_BUDGET 64 /* messages read per turn of the loop, per channel */
/* what a new hello of the same process reads of its earlier session's channel first */
#define SCD_SUBMIT_HELLO_BUDGET	 65536
#define SCD_SUBMIT_ACCEPT_BUDGET 16 /* connections accepted per turn of the loop */

/* Creates the listening socket next to the control socket (same directory, same
 * permissions); SC_OK without a channel where its path would be too long. */
sc_status_t scd_submit_listen(scd_ctl_t *ctl);
/* Offers session s a channel in its hello's reply r (its token drawn now); nothing where
 * the daemon has none or the random source fails. */
void scd_submit_offer(scd_ctl_t *ctl, scd_session_t *s, Sparsecomm__HelloReply *r);
/* Reads up to budget messages of s's bound channel and serves them; marks the session
 * gone at the channel's hang-up. */
void scd_submit_read(scd_session_t *s, int budget);
/* The final read of s's channel as its session ends: shut down for reading (a writer
 * still alive gets EPIPE), then everything it holds is served; nothing once dropped. */
void scd_submit_drain(scd_session_t *s);
/* Closes the connections that sent no token in time, and polls the listener again where
 * it rested for want of descriptors (the periodic tick). */
void scd_submit_tick(scd_ctl_t *ctl);
/* Closes the listening socket and the connections waiting for a token; unlinks the path. */
void scd_submit_destroy(scd_ctl_t *ctl);

#endif
