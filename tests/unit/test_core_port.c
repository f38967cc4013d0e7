/* test_core_port.c: the coordinator port drawn for a daemon that binds it later
 * (proto/port.h), shared by the launcher and the tests' lone daemons. */
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "port.h"
#include "unit.h"

UNIT_TEST(port_pick_below_the_ephemeral_range_and_free)
{
	int lo = sc_port_ephemeral_low();
	CHECK_TRUE(lo > 0 && lo < 65536);
	for (int i = 0; i < 20; i++) {
		int port = sc_port_pick();
		CHECK_TRUE(port > 0);
		if (lo - (lo / 2 > 1024 ? lo / 2 : 1024) >= 256)
			CHECK_MSG(port >= 1024 && port < lo,
				  "port %d drawn inside the ephemeral range (from %d)", port,
				  lo);
		CHECK_TRUE(sc_port_free(port) == port);
	}
	/* a port held by a listener is not free */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	CHECK_TRUE(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
		   listen(fd, 1) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	CHECK_TRUE(sc_port_free(ntohs(a.sin_port)) == -1);
	close(fd);
}
