/* janitor.c: the job secret's janitor (see janitor.h). */
#include "janitor.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

int run_janitor_start(const char *path)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		errno = e;
		return -1;
	}
	if (pid == 0) {
		/* nothing of the launcher's stays open here: a reader of its output must not
		 * wait for the janitor */
		int null = open("/dev/null", O_RDWR);
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
			dup2(null, 2);
		}
		if (dup2(p[0], 3) < 0)
			_exit(1);
		closefrom(4);
		setsid();
		signal(SIGINT, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		char c;
		ssize_t n;
		do
			n = read(3, &c, 1);
		while (n < 0 && errno == EINTR);
		unlink(path);
		_exit(0);
	}
	close(p[0]);
	return p[1];
}
