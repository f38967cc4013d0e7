/*
 * test_wheel.c: the daemon finds a shared library in the Python packages of the
 * interpreters it would run (transport/wheel.c), as the nccl transport does for the
 * nvidia-nccl wheel: $SPARSECOMM_PYTHON's first, then python3 on $PATH in order, each file
 * once, a virtual environment's bin/python3 naming its own prefix.
 */
#include "unit.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport/wheel.h"

#define REL "nvidia/nccl/lib/libnccl.so.2"

/* Creates dir/rel, and every folder on the way, with the given mode. */
static void make_file(const char *dir, const char *rel, mode_t mode)
{
	char path[PATH_MAX];
	CHECK_TRUE(snprintf(path, sizeof path, "%s/%s", dir, rel) < (int)sizeof path);
	for (char *p = path + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		CHECK_MSG(mkdir(path, 0700) == 0 || access(path, F_OK) == 0, "mkdir %s", path);
		*p = '/';
	}
	int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, mode);
	CHECK_MSG(fd >= 0, "create %s", path);
	close(fd);
}

static void check_real(const char *got, const char *dir, const char *rel)
{
	char want[PATH_MAX], path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", dir, rel);
	CHECK_TRUE(realpath(path, want) != NULL);
	CHECK_MSG(!strcmp(got, want), "found %s, want %s", got, want);
}

UNIT_TEST(wheel_finds_the_pythons_nccl_in_order)
{
	char root[] = "/tmp/sc-wheel.XXXXXX";
	CHECK_TRUE(mkdtemp(root) != NULL);
	char venv[64], named[64], plain[64], noexec[64];
	snprintf(venv, sizeof venv, "%s/venv", root);
	snprintf(named, sizeof named, "%s/named", root);
	snprintf(plain, sizeof plain, "%s/plain", root);
	snprintf(noexec, sizeof noexec, "%s/noexec", root);
	make_file(venv, "bin/python3", 0700);
	make_file(venv, "lib/python3.12/site-packages/" REL, 0600);
	make_file(named, "bin/python3", 0700);
	make_file(named, "local/lib/python3.11/dist-packages/" REL, 0600);
	make_file(plain, "bin/python3", 0700);	/* a python without the wheel */
	make_file(noexec, "bin/python3", 0600); /* not an interpreter */
	make_file(noexec, "lib/python3.12/site-packages/" REL, 0600);

	const char *orig = getenv("PATH");
	char saved[2048];
	snprintf(saved, sizeof saved, "%s", orig ? orig : "/usr/bin:/bin");
	char path[512];
	snprintf(path, sizeof path, "%s/bin:%s/bin:%s/bin:%s/bin::", plain, noexec, venv, venv);
	setenv("PATH", path, 1);
	unsetenv("SPARSECOMM_PYTHON");
	char out[4][SCD_WHEEL_PATH_MAX];
	int n = scd_wheel_find(REL, out, 4);
	CHECK_EQ_INT(n, 1); /* the venv's, once; neither the plain python nor a non-program */
	check_real(out[0], venv, "lib/python3.12/site-packages/" REL);

	char py[128];
	snprintf(py, sizeof py, "%s/bin/python3", named);
	setenv("SPARSECOMM_PYTHON", py, 1);
	n = scd_wheel_find(REL, out, 4);
	CHECK_EQ_INT(n, 2); /* the named python's first */
	check_real(out[0], named, "local/lib/python3.11/dist-packages/" REL);
	check_real(out[1], venv, "lib/python3.12/site-packages/" REL);
	CHECK_EQ_INT(scd_wheel_find(REL, out, 1), 1); /* max is kept */

	setenv("PATH", "/nonexistent", 1);
	unsetenv("SPARSECOMM_PYTHON");
	CHECK_EQ_INT(scd_wheel_find(REL, out, 4), 0);
	setenv("PATH", saved, 1);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	CHECK_TRUE(system(cmd) == 0);
}
