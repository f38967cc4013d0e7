/* test_addr.c: host:port parsing, resolution and the announced data-plane address
 * (daemon/world/addr.c). */
#include <string.h>

#include "unit.h"
#include "world/addr.h"

UNIT_TEST(addr_split)
{
	char host[64], port[8], err[256];
	CHECK_EQ_INT(scd_addr_split("vm:17716", host, sizeof(host), port, sizeof(port), err,
				    sizeof(err)),
		     SC_OK);
	CHECK_TRUE(!strcmp(host, "vm") && !strcmp(port, "17716"));
	CHECK_EQ_INT(scd_addr_split("[::1]:7700", host, sizeof(host), port, sizeof(port), err,
				    sizeof(err)),
		     SC_OK);
	CHECK_TRUE(!strcmp(host, "::1") && !strcmp(port, "7700"));
	CHECK_EQ_INT(
	    scd_addr_split(":7700", host, sizeof(host), port, sizeof(port), err, sizeof(err)),
	    SC_OK);
	CHECK_TRUE(!strcmp(host, ""));
	const char *bad[] = {"vm",     "vm:",	   "vm:0",     "vm:65536",
			     "vm:12x", "::1:7700", "[::1]7700"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		CHECK_EQ_INT(scd_addr_split(bad[i], host, sizeof(host), port, sizeof(port), err,
					    sizeof(err)),
			     SC_ERR_INVALID);
		CHECK_MSG(strstr(err, bad[i]) != NULL, "'%s': error '%s' does not name it",
			  bad[i], err);
	}
}

UNIT_TEST(addr_resolve_and_endpoint)
{
	char out[128], err[256];
	int v6 = -1;
	CHECK_EQ_INT(scd_addr_resolve("localhost", out, sizeof(out), &v6, err, sizeof(err)),
		     SC_OK);
	CHECK_MSG(!strcmp(out, "127.0.0.1") && v6 == 0, "localhost resolved to %s", out);
	CHECK_EQ_INT(
	    scd_addr_zmq_endpoint("localhost:7700", out, sizeof(out), &v6, err, sizeof(err)),
	    SC_OK);
	CHECK_MSG(!strcmp(out, "tcp://127.0.0.1:7700"), "endpoint %s", out);
	CHECK_EQ_INT(
	    scd_addr_zmq_endpoint("[::1]:7700", out, sizeof(out), &v6, err, sizeof(err)),
	    SC_OK);
	CHECK_MSG(!strcmp(out, "tcp://[::1]:7700") && v6 == 1, "endpoint %s", out);
	CHECK_EQ_INT(scd_addr_zmq_endpoint("*:7700", out, sizeof(out), &v6, err, sizeof(err)),
		     SC_OK);
	CHECK_MSG(!strcmp(out, "tcp://0.0.0.0:7700"), "endpoint %s", out);
	CHECK_EQ_INT(
	    scd_addr_resolve("no-such-host.invalid", out, sizeof(out), &v6, err, sizeof(err)),
	    SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "no-such-host.invalid") != NULL, "error '%s'", err);
}

UNIT_TEST(addr_advertised)
{
	char out[64], err[256];
	CHECK_TRUE(scd_addr_is_wildcard("0.0.0.0") && scd_addr_is_wildcard("::") &&
		   scd_addr_is_wildcard("") && scd_addr_is_wildcard("*"));
	CHECK_TRUE(!scd_addr_is_wildcard("127.0.0.1") && !scd_addr_is_wildcard("vm"));
	/* a named data address is announced as it is; advertise_addr wins */
	CHECK_EQ_INT(scd_addr_advertised("", "10.1.2.3", "127.0.0.1", out, sizeof(out), err,
					 sizeof(err)),
		     SC_OK);
	CHECK_TRUE(!strcmp(out, "10.1.2.3"));
	CHECK_EQ_INT(scd_addr_advertised("node7", "0.0.0.0", "127.0.0.1", out, sizeof(out), err,
					 sizeof(err)),
		     SC_OK);
	CHECK_TRUE(!strcmp(out, "node7"));
	/* a wildcard announces the route to the coordinator: loopback for a local one */
	CHECK_EQ_INT(
	    scd_addr_advertised("", "0.0.0.0", "localhost", out, sizeof(out), err, sizeof(err)),
	    SC_OK);
	CHECK_MSG(!strcmp(out, "127.0.0.1"), "announced %s", out);
	CHECK_EQ_INT(scd_addr_advertised("0.0.0.0", "0.0.0.0", "localhost", out, sizeof(out),
					 err, sizeof(err)),
		     SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "advertise_addr") != NULL, "error '%s'", err);
}
