/* shmreap.c: see shmreap.h. */
#include "util/shmreap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/log.h"

static void lock_path(const char *dir, int pid, char *buf, size_t len)
{
	snprintf(buf, len, "%s/sparsecomm.%d.lock", dir, pid);
}

static int held_fd = -1;

/* At exit: the lock file goes when no other daemon of this pid number shares it. */
static void release(void)
{
	if (held_fd < 0)
		return;
	char path[128];
	lock_path("/dev/shm", (int)getpid(), path, sizeof(path));
	if (flock(held_fd, LOCK_EX | LOCK_NB) == 0)
		unlink(path);
	close(held_fd);
	held_fd = -1;
}

int scd_shmreap_hold(void)
{
	char path[128];
	lock_path("/dev/shm", (int)getpid(), path, sizeof(path));
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		scd_warn(SCD_SUB_MAIN,
			 "cannot create %s (%s): this daemon's shared memory is "
			 "told alive by its pid alone",
			 path, strerror(errno));
		return -1;
	}
	int rc;
	do
		rc = flock(fd, LOCK_SH);
	while (rc != 0 && errno == EINTR);
	if (rc != 0) {
		scd_warn(SCD_SUB_MAIN,
			 "cannot lock %s (%s): this daemon's shared memory is told "
			 "alive by its pid alone",
			 path, strerror(errno));
		close(fd);
		return -1;
	}
	held_fd = fd;
	atexit(release);
	return fd;
}

/* 1: a live daemon holds pid's lock; 0: the lock file exists and nobody holds it (locked
 * here exclusively on return through *fd_p, to be removed); -1: there is no lock file. */
static int lock_held(const char *dir, int pid, int *fd_p)
{
	char path[128];
	lock_path(dir, pid, path, sizeof(path));
	*fd_p = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ENOENT ? -1 : 1; /* unreadable: not ours to judge */
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		close(fd);
		return 1;
	}
	*fd_p = fd;
	return 0;
}

/* Whether the objects of daemon pid are stale (see shmreap.h). */
static int pid_stale(const char *dir, int pid)
{
	int fd;
	int held = lock_held(dir, pid, &fd);
	if (fd >= 0)
		close(fd);
	if (held >= 0)
		return !held;
	return kill(pid, 0) != 0 && errno == ESRCH;
}

void scd_shmreap_stale(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	char path[600];
	while ((de = readdir(d))) {
		int pid = 0, n = 0;
		struct stat st;
		if (sscanf(de->d_name, "sparsecomm.%d.%n", &pid, &n) != 1 || n == 0 ||
		    pid <= 0 || pid == (int)getpid())
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
			continue;
		if (!strcmp(de->d_name + n, "lock")) {
			/* a lock file nobody holds: its daemon is gone */
			int fd;
			if (lock_held(dir, pid, &fd) == 0) {
				unlink(path);
				close(fd);
			}
			continue;
		}
		if (!pid_stale(dir, pid))
			continue;
		if (unlink(path) == 0)
			scd_info(SCD_SUB_MAIN, "removed %s, left by daemon pid %d", path, pid);
	}
	closedir(d);
}
