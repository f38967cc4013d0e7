/* peer.c: see peer.h. */
#include "ctl/peer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

int scd_peer_conn_dup(const scd_peer_cred_t *c)
{
	if (!c || !c->known || c->fd < 0)
		return -1;
	int fd = fcntl(c->fd, F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		return -1;
	struct ucred uc;
	socklen_t len = sizeof(uc);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) != 0 || uc.uid != c->uid ||
	    uc.gid != c->gid || uc.pid != c->pid) {
		close(fd);
		return -1;
	}
	return fd;
}

long scd_peer_conn_unread(int conn)
{
	int n = 0;
	if (conn < 0 || ioctl(conn, TIOCOUTQ, &n) != 0)
		return -1;
	return n;
}

void scd_peer_conn_kick(int conn)
{
	if (conn < 0)
		return;
	shutdown(conn, SHUT_RDWR);
	close(conn);
}

int scd_peer_pidfd(int pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	errno = ENOSYS;
	return -1;
#endif
}

int scd_peer_is_owner(uint32_t uid)
{
	return uid == 0 || uid == geteuid();
}

const char *scd_peer_pid_text(int pid, int declared, char *buf, size_t len)
{
	if (pid > 0)
		snprintf(buf, len, "pid %d", pid);
	else
		snprintf(buf, len, "pid unknown (%d in its own PID namespace)", declared);
	return buf;
}
