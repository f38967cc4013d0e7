/* tcpinfo.c: TCP_INFO's counters (see tcpinfo.h). */
#include "util/tcpinfo.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

int scd_tcp_bytes_received(int fd, uint64_t *bytes_p)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
	    len <
		offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received))
		return -1;
	*bytes_p = ti.tcpi_bytes_received;
	return 0;
}
