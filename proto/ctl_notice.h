/*
 * ctl_notice.h: the daemon's notice to a client it drops for what the client did (a
 * message on its submit channel that is not a request, one of zero bytes or over the
 * bound, a channel that could not be bound): an ErrorReply with seq 0 whose message
 * begins with SC_CTL_DROP_NOTICE, then the reason. The library ends the client with that
 * reason (every operation in flight and every later call fails with it); any other
 * unsolicited ErrorReply is only logged.
 */
#ifndef SC_CTL_NOTICE_H
#define SC_CTL_NOTICE_H

#define SC_CTL_DROP_NOTICE "the daemon dropped this client: "

#endif
