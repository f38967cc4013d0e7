/*
 * jobd.c: what `sparsecomm-run --node-daemon` needs besides starting the daemon (main.c):
 * the watch over the node's trainers, which are not its children (each writes its pid
 * into the job's directory; a pidfd, or kill(pid, 0) where pidfd_open is missing, says
 * when it has gone), and the removal of the node's files (jobd.h).
 */
#include "jobd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int run_watch_init(run_watch_t *w, int n)
{
	w->n = n;
	w->pid = calloc((size_t)n, sizeof(pid_t));
	w->fd = calloc((size_t)n, sizeof(int));
	w->gone = calloc((size_t)n, sizeof(bool));
	if (!w->pid || !w->fd || !w->gone)
		return -1;
	for (int k = 0; k < n; k++)
		w->fd[k] = -1;
	return 0;
}

static pid_t read_pid(const char *path)
{
	char buf[32];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t m = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (m <= 0)
		return 0;
	buf[m] = 0;
	long v = strtol(buf, NULL, 10);
	return v > 0 && v <= INT_MAX && strchr(buf, '\n') ? (pid_t)v : 0; /* a whole line */
}

static bool exited(run_watch_t *w, int k)
{
	if (w->fd[k] >= 0) {
		struct pollfd p = {.fd = w->fd[k], .events = POLLIN};
		return poll(&p, 1, 0) > 0;
	}
	return kill(w->pid[k], 0) < 0 && errno == ESRCH;
}

int run_watch_scan(run_watch_t *w, const char *dir, int node, int *registered_p)
{
	int alive = 0, registered = 0;
	for (int k = 0; k < w->n; k++) {
		if (!w->pid[k]) {
			char path[PATH_MAX];
			snprintf(path, sizeof(path), "%s/node%d.t%d", dir, node, k);
			w->pid[k] = read_pid(path);
			if (w->pid[k]) {
#ifdef SYS_pidfd_open
				w->fd[k] = (int)syscall(SYS_pidfd_open, w->pid[k], 0);
#endif
				if (w->fd[k] < 0 && kill(w->pid[k], 0) < 0 && errno == ESRCH)
					w->gone[k] = true; /* gone before we looked */
			}
		}
		if (!w->pid[k])
			continue;
		registered++;
		if (!w->gone[k] && exited(w, k))
			w->gone[k] = true;
		alive += !w->gone[k];
	}
	*registered_p = registered;
	return alive;
}

void run_watch_free(run_watch_t *w)
{
	for (int k = 0; w->fd && k < w->n; k++)
		if (w->fd[k] >= 0)
			close(w->fd[k]);
	free(w->pid);
	free(w->fd);
	free(w->gone);
	*w = (run_watch_t){0};
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void run_node_files_remove(const char *dir, int node)
{
	char path[PATH_MAX], prefix[32];
	snprintf(path, sizeof(path), "%s/node%d", dir, node);
	nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	snprintf(path, sizeof(path), "%s/daemon%d.log", dir, node);
	unlink(path);
	/* node<N>.t<L>, node<N>.run.log, node<N>.failed */
	int plen = snprintf(prefix, sizeof(prefix), "node%d.", node);
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, prefix, (size_t)plen))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(dir); /* the last node of the job on this machine */
	snprintf(path, sizeof(path), "%s", dir);
	char *slash = strrchr(path, '/');
	if (slash && slash != path) {
		*slash = 0;
		rmdir(path); /* the user's jobs' directory, when it was the last job */
	}
}
