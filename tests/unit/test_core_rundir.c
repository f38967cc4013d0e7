/* test_core_rundir.c: where a daemon's socket is when nobody names it (proto/rundir.h),
 * shared by the daemon's runtime_dir default and the clients' fallback. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rundir.h"
#include "unit.h"

UNIT_TEST(rundir_defaults)
{
	char buf[256], saved[256] = "";
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	if (xdg)
		snprintf(saved, sizeof(saved), "%s", xdg);
	setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
	CHECK_TRUE(!strcmp(sc_rundir_default(0, buf, sizeof(buf)), SC_RUNDIR_SYSTEM));
	CHECK_TRUE(
	    !strcmp(sc_rundir_default(1000, buf, sizeof(buf)), "/run/user/1000/sparsecomm"));
	unsetenv("XDG_RUNTIME_DIR");
	CHECK_TRUE(!strcmp(sc_rundir_default(1000, buf, sizeof(buf)), "/tmp/sparsecomm-1000"));

	/* $SPARSECOMM_SOCKET wins; else the caller's own default socket when it exists
	 * (here a runtime directory without one), else the system daemon's */
	setenv("SPARSECOMM_SOCKET", "ipc:///somewhere/ctl.sock", 1);
	CHECK_TRUE(!strcmp(sc_socket_default(buf, sizeof(buf)), "ipc:///somewhere/ctl.sock"));
	unsetenv("SPARSECOMM_SOCKET");
	setenv("XDG_RUNTIME_DIR", "/nonexistent-sc-test", 1);
	sc_socket_default(buf, sizeof(buf));
	CHECK_MSG(!strcmp(buf, SC_RUNDIR_SYSTEM "/ctl.sock"), "fallback %s", buf);
	if (geteuid() != 0) { /* root's own default is the system daemon's */
		char dir[] = "/tmp/sc-rundir-XXXXXX", path[300];
		CHECK_TRUE(mkdtemp(dir) != NULL);
		snprintf(path, sizeof(path), "%s/sparsecomm", dir);
		CHECK_TRUE(mkdir(path, 0700) == 0);
		snprintf(path, sizeof(path), "%s/sparsecomm/ctl.sock", dir);
		close(open(path, O_CREAT | O_WRONLY, 0600));
		setenv("XDG_RUNTIME_DIR", dir, 1);
		CHECK_MSG(!strcmp(sc_socket_default(buf, sizeof(buf)), path), "own socket %s",
			  buf);
		unlink(path);
		snprintf(path, sizeof(path), "%s/sparsecomm", dir);
		rmdir(path);
		rmdir(dir);
	}
	if (saved[0])
		setenv("XDG_RUNTIME_DIR", saved, 1);
	else
		unsetenv("XDG_RUNTIME_DIR");
}
