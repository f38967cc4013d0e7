/*
 * wheel.c: shared libraries of Python wheels (wheel.h).
 */
#include "transport/wheel.h"

#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Adds the matches of the prefix's package directories for rel. */
static int add_prefix(const char *prefix, const char *rel, char (*out)[SCD_WHEEL_PATH_MAX],
		      int n, int max)
{
	static const char *const dirs[] = {"lib/python3*/site-packages",
					   "lib/python3*/dist-packages",
					   "local/lib/python3*/dist-packages"};
	for (size_t d = 0; d < sizeof dirs / sizeof dirs[0] && n < max; d++) {
		char pat[PATH_MAX];
		if (snprintf(pat, sizeof pat, "%s/%s/%s", prefix, dirs[d], rel) >=
		    (int)sizeof pat)
			continue;
		glob_t g;
		if (glob(pat, 0, NULL, &g) != 0)
			continue;
		for (size_t i = 0; i < g.gl_pathc && n < max; i++) {
			/* one file reached through two names (/bin and /usr/bin) counts once */
			char real[PATH_MAX];
			if (!realpath(g.gl_pathv[i], real) ||
			    strlen(real) >= SCD_WHEEL_PATH_MAX)
				continue;
			int seen = 0;
			for (int k = 0; k < n && !seen; k++)
				seen = !strcmp(out[k], real);
			if (!seen)
				snprintf(out[n++], SCD_WHEEL_PATH_MAX, "%s", real);
		}
		globfree(&g);
	}
	return n;
}

/* The prefix of the interpreter at path: its folder's parent ("/usr" for /usr/bin/python3). */
static int add_python(const char *path, const char *rel, char (*out)[SCD_WHEEL_PATH_MAX], int n,
		      int max)
{
	char prefix[PATH_MAX];
	if (access(path, X_OK) != 0 ||
	    snprintf(prefix, sizeof prefix, "%s", path) >= (int)sizeof prefix)
		return n;
	for (int up = 0; up < 2; up++) {
		char *slash = strrchr(prefix, '/');
		if (!slash)
			return n;
		*slash = '\0';
	}
	return add_prefix(*prefix ? prefix : "/", rel, out, n, max);
}

int scd_wheel_find(const char *rel, char (*out_p)[SCD_WHEEL_PATH_MAX], int max)
{
	int n = 0;
	const char *named = getenv("SPARSECOMM_PYTHON");
	if (named && *named)
		n = add_python(named, rel, out_p, n, max);
	const char *env = getenv("PATH");
	if (!env)
		return n;
	char *path = strdup(env), *save = NULL;
	if (!path)
		return n;
	for (char *dir = strtok_r(path, ":", &save); dir && n < max;
	     dir = strtok_r(NULL, ":", &save)) {
		char py[PATH_MAX];
		if (*dir && snprintf(py, sizeof py, "%s/python3", dir) < (int)sizeof py)
			n = add_python(py, rel, out_p, n, max);
	}
	free(path);
	return n;
}
