/*
 * unit_gpu.c: what the GPU test runner (build/bin/sparsecomm-unit-gpu, `make test-gpu`)
 * adds to the unit runner: before any test, a forked child tries scg_init(0) of the CUDA
 * build (CUDA is never initialised in the runner itself: its state would not survive the
 * fork of every test). Without a usable GPU every test is reported skipped, with the
 * reason; never passed.
 */
#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scg.h"
#include "unit.h"

const char *unit_skip_all(void)
{
	static char reason[512];
	int fd[2];
	if (pipe(fd) != 0)
		return "cannot probe the GPU (pipe failed)";
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		close(fd[0]);
		close(fd[1]);
		return "cannot probe the GPU (fork failed)";
	}
	if (pid == 0) {
		close(fd[0]);
		sc_status_t st = scg_init(0);
		if (st != SC_OK) {
			const char *e = scg_error();
			if (write(fd[1], e, strlen(e)) < 0)
				_exit(2);
			_exit(1);
		}
		_exit(0);
	}
	close(fd[1]);
	size_t n = 0;
	ssize_t r;
	while (n < sizeof reason - 1 &&
	       (r = read(fd[0], reason + n, sizeof reason - 1 - n)) > 0)
		n += (size_t)r;
	reason[n] = '\0';
	close(fd[0]);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		printf("gpu tests: %s build on CUDA device 0\n", scg_backend());
		return NULL;
	}
	if (!n)
		snprintf(reason, sizeof reason, "no usable GPU (the probe %s %d)",
			 WIFSIGNALED(status) ? "died of signal" : "exited with",
			 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	static char line[600];
	snprintf(line, sizeof line, "no usable GPU: %s", reason);
	return line;
}
