/* dirlock.c: see dirlock.h. */
#include "util/dirlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* The pid the holder wrote, or -1 when the file holds none (yet). */
static long holder_pid(int fd)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *end;
	long pid = strtol(buf, &end, 10);
	return end != buf && pid > 0 ? pid : -1;
}

sc_status_t scd_dirlock_take(const char *dir, int *fd_p, char *err, size_t err_len)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/sparsecommd.lock", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		snprintf(err, err_len, "runtime directory %s: cannot open its lock %s: %s", dir,
			 path, strerror(errno));
		return SC_ERR_SYSTEM;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		int e = errno;
		long pid = holder_pid(fd);
		close(fd);
		if (e != EWOULDBLOCK) {
			snprintf(err, err_len, "runtime directory %s: cannot lock %s: %s", dir,
				 path, strerror(e));
			return SC_ERR_SYSTEM;
		}
		if (pid > 0)
			snprintf(
			    err, err_len,
			    "runtime directory %s is in use by another sparsecommd (pid %ld, "
			    "holding %s): give this daemon its own runtime_dir",
			    dir, pid, path);
		else
			snprintf(
			    err, err_len,
			    "runtime directory %s is in use by another sparsecommd (holding "
			    "%s): give this daemon its own runtime_dir",
			    dir, path);
		return SC_ERR_BUSY;
	}
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)n, 0) != n) {
		snprintf(err, err_len, "runtime directory %s: cannot write %s: %s", dir, path,
			 strerror(errno));
		close(fd);
		return SC_ERR_SYSTEM;
	}
	*fd_p = fd;
	return SC_OK;
}
