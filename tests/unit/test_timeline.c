/* test_timeline.c: the Chrome-trace writer (daemon/util/timeline.c): file names, escaping,
 * the file it leaves once stopped, and the events it drops when its buffer is full. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "unit.h"
#include "util/timeline.h"

static char *slurp(const char *path, size_t *len_p)
{
	FILE *f = fopen(path, "rb");
	CHECK_MSG(f != NULL, "cannot open %s", path);
	static char buf[1 << 20];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	*len_p = n;
	return buf;
}

static size_t count(const char *s, const char *what)
{
	size_t n = 0;
	for (const char *p = s; (p = strstr(p, what)); p += strlen(what))
		n++;
	return n;
}

/* Runs python3's json module on the file when there is one: the strict check. */
static void check_json(const char *path)
{
	if (access("/usr/bin/python3", X_OK) != 0)
		return;
	char cmd[512];
	snprintf(cmd, sizeof(cmd),
		 "/usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1], "
		 "encoding=\"utf-8\"))' %s",
		 path);
	CHECK_MSG(system(cmd) == 0, "%s is not valid JSON (python3's json.load)", path);
}

UNIT_TEST(timeline_path_names_the_rank)
{
	char out[64], err[256];
	CHECK_EQ_INT(scd_tl_path("/t/tl-%r.json", 3, 4, out, sizeof(out), err, sizeof(err)),
		     SC_OK);
	CHECK_TRUE(!strcmp(out, "/t/tl-3.json"));
	CHECK_EQ_INT(scd_tl_path("/t/a%%r", 3, 4, out, sizeof(out), err, sizeof(err)), SC_OK);
	CHECK_TRUE(!strcmp(out, "/t/a%r.3")); /* %% is a '%', so no %r: the rank goes last */
	CHECK_EQ_INT(scd_tl_path("/t/tl.json", 12, 16, out, sizeof(out), err, sizeof(err)),
		     SC_OK);
	CHECK_TRUE(!strcmp(out, "/t/tl.12.json"));
	CHECK_EQ_INT(scd_tl_path("/t/tl.json", 0, 1, out, sizeof(out), err, sizeof(err)),
		     SC_OK);
	CHECK_TRUE(!strcmp(out, "/t/tl.json")); /* one daemon: the name as given */
	CHECK_EQ_INT(scd_tl_path("/t/tl.json", 0, 16, out, sizeof(out), err, sizeof(err)),
		     SC_OK);
	CHECK_TRUE(!strcmp(out, "/t/tl.json")); /* node 0: the name as given, as Horovod's */
	CHECK_EQ_INT(scd_tl_path("/t/a%%r", 0, 4, out, sizeof(out), err, sizeof(err)), SC_OK);
	CHECK_TRUE(!strcmp(out, "/t/a%r"));
	CHECK_EQ_INT(scd_tl_path("", 0, 1, out, sizeof(out), err, sizeof(err)), SC_ERR_INVALID);
	CHECK_EQ_INT(scd_tl_path("/t/0123456789012345678901234567890123456789012345678901.json",
				 7, 8, out, 60, err, sizeof(err)),
		     SC_ERR_INVALID);
	CHECK_MSG(strstr(err, "rank 7") != NULL, "error: %s", err);
}

UNIT_TEST(timeline_escape)
{
	char out[64];
	scd_tl_escape("a\"b\\c\nd\x01", out, sizeof(out));
	CHECK_MSG(!strcmp(out, "a\\\"b\\\\c\\u000ad\\u0001"), "escaped: %s", out);
	scd_tl_escape("caf\xc3\xa9 \xff", out, sizeof(out)); /* UTF-8 kept, a bad byte not */
	CHECK_MSG(!strcmp(out, "caf\xc3\xa9 \\ufffd"), "escaped: %s", out);
	scd_tl_escape("\xe0\x80\x80", out, sizeof(out)); /* overlong: three bad bytes */
	CHECK_MSG(!strcmp(out, "\\ufffd\\ufffd\\ufffd"), "escaped: %s", out);
	/* cut before an escape that does not fit, never inside it */
	CHECK_EQ_INT(scd_tl_escape("ab\"", out, 4), 2);
	CHECK_TRUE(!strcmp(out, "ab"));
}

UNIT_TEST(timeline_valid_after_stop_and_nested)
{
	char path[] = "/tmp/sc-tl-XXXXXX", err[256];
	int fd = mkstemp(path);
	CHECK_TRUE(fd >= 0);
	close(fd);
	CHECK_EQ_INT(scd_tl_begin(), 0); /* off */
	CHECK_EQ_INT(scd_tl_start(path, 2, 1, 0, 0, err, sizeof(err)), SC_OK);
	CHECK_TRUE(scd_tl_on());
	scd_tl_thread("engine");
	uint64_t outer = scd_tl_begin();
	CHECK_TRUE(outer != 0);
	uint64_t inner = scd_tl_begin();
	scd_tl_arg_t a[] = {{"bytes", NULL, 4096}, {"scheme", "dense\"ring", 0}};
	scd_tl_here("xchg", inner, a, 2);
	scd_tl_here("scheme", outer, NULL, 0);
	scd_tl_tensor("layer\"1\n", "copy_out", scd_tl_begin(), NULL, 0);
	scd_tl_counts_t c;
	CHECK_EQ_INT(scd_tl_stop(&c), SC_OK);
	CHECK_TRUE(!scd_tl_on());
	CHECK_EQ_INT(c.dropped, 0);
	size_t len;
	char *s = slurp(path, &len);
	CHECK_MSG(!strncmp(s, "{\"traceEvents\":[", 16), "file starts: %.40s", s);
	CHECK_MSG(len > 3 && !strcmp(s + len - 3, "}}\n"), "file ends: %s", s + len - 20);
	CHECK_EQ_INT(count(s, "\"ph\":\"X\""), 3);
	CHECK_EQ_INT(count(s, "\"name\":\"thread engine\""), 1);
	CHECK_TRUE(strstr(s, "\"name\":\"layer\\\"1\\u000a\"") != NULL);
	CHECK_TRUE(strstr(s, "\"bytes\":4096,\"scheme\":\"dense\\\"ring\"") != NULL);
	CHECK_TRUE(strstr(s, "\"pid\":2") != NULL);
	check_json(path);
	/* the inner phase ends inside the outer one: "xchg" was written first and starts
	 * no earlier than "scheme" */
	const char *x = strstr(s, "\"name\":\"xchg\""), *o = strstr(s, "\"name\":\"scheme\"");
	CHECK_TRUE(x && o && x < o);
	double xts = atof(strstr(x, "\"ts\":") + 5), xd = atof(strstr(x, "\"dur\":") + 6);
	double ots = atof(strstr(o, "\"ts\":") + 5), od = atof(strstr(o, "\"dur\":") + 6);
	CHECK_MSG(ots <= xts && xts + xd <= ots + od, "xchg %.3f+%.3f outside scheme %.3f+%.3f",
		  xts, xd, ots, od);
	/* after stop: nothing is written, an old begin included */
	scd_tl_here("late", outer, NULL, 0);
	unlink(path);
}

UNIT_TEST(timeline_drops_and_counts_when_full)
{
	char path[] = "/tmp/sc-tl-XXXXXX", path2[] = "/tmp/sc-tl2-XXXXXX", err[256];
	int fd = mkstemp(path);
	CHECK_TRUE(fd >= 0);
	close(fd);
	fd = mkstemp(path2);
	CHECK_TRUE(fd >= 0);
	close(fd);
	/* 4 KiB, written only at stop: a few dozen events fit, the rest are dropped */
	CHECK_EQ_INT(scd_tl_start(path, 0, 1, 4096, -1, err, sizeof(err)), SC_OK);
	for (int i = 0; i < 1000; i++)
		scd_tl_tensor("t", "local_sum", scd_tl_begin(), NULL, 0);
	/* starting again switches files: the first is closed, with its count */
	CHECK_EQ_INT(scd_tl_start(path2, 0, 1, 0, 0, err, sizeof(err)), SC_OK);
	scd_tl_tensor("t", "sparsify", scd_tl_begin(), NULL, 0);
	scd_tl_counts_t c;
	CHECK_EQ_INT(scd_tl_stop(&c), SC_OK);
	CHECK_EQ_INT(c.dropped, 0);
	CHECK_EQ_INT(c.events, 3); /* the lane's two metadata events and the phase */
	size_t len;
	char *s = slurp(path, &len);
	size_t written = count(s, "\"ph\":\"X\"");
	CHECK_MSG(written > 10 && written < 1000, "%zu events in a 4 KiB buffer", written);
	char want[64];
	snprintf(want, sizeof(want), "\"dropped_events\":%zu}", 1000 - written);
	CHECK_MSG(strstr(s, want) != NULL, "trailer lacks %s: %s", want, s + len - 120);
	check_json(path);
	s = slurp(path2, &len);
	CHECK_EQ_INT(count(s, "\"ph\":\"X\""), 1);
	CHECK_TRUE(strstr(s, "\"dropped_events\":0}") != NULL);
	check_json(path2);
	unlink(path);
	unlink(path2);
}

UNIT_TEST(timeline_refuses_unwritable_file)
{
	char err[256];
	CHECK_EQ_INT(scd_tl_start("/nonexistent-dir/tl.json", 0, 1, 0, 0, err, sizeof(err)),
		     SC_ERR_SYSTEM);
	CHECK_MSG(strstr(err, "/nonexistent-dir/tl.json") && strstr(err, "No such file"),
		  "error: %s", err);
	CHECK_TRUE(!scd_tl_on());
	CHECK_EQ_INT(scd_tl_stop(NULL), SC_OK);
	/* a symbolic link is not followed (nor the file it names truncated) */
	char target[] = "/tmp/sc-tl-target-XXXXXX", link[64];
	int fd = mkstemp(target);
	CHECK_TRUE(fd >= 0);
	CHECK_TRUE(write(fd, "keep", 4) == 4);
	close(fd);
	snprintf(link, sizeof(link), "%s.link", target);
	CHECK_TRUE(symlink(target, link) == 0);
	CHECK_EQ_INT(scd_tl_start(link, 0, 1, 0, 0, err, sizeof(err)), SC_ERR_SYSTEM);
	CHECK_TRUE(!scd_tl_on());
	size_t len;
	CHECK_TRUE(!strcmp(slurp(target, &len), "keep"));
	unlink(link);
	unlink(target);
}

/* A write that fails while the timeline runs (a full disk; here the file size limit) is
 * logged when it happens, naming the file and the cause: it was said only when the
 * timeline stopped, so an operator watching the log saw nothing. */
UNIT_TEST(timeline_logs_a_failed_write_when_it_happens)
{
	char path[] = "/tmp/sc-tl-XXXXXX", err[256];
	int fd = mkstemp(path);
	CHECK_TRUE(fd >= 0);
	close(fd);
	struct rlimit was, small = {2048, 2048};
	CHECK_EQ_INT(getrlimit(RLIMIT_FSIZE, &was), 0);
	signal(SIGXFSZ, SIG_IGN);
	CHECK_EQ_INT(setrlimit(RLIMIT_FSIZE, &small), 0);
	unit_stderr_t cap;
	unit_stderr_capture(&cap);
	CHECK_EQ_INT(scd_tl_start(path, 0, 1, 0, 10, err, sizeof(err)), SC_OK);
	for (int i = 0; i < 200; i++)
		scd_tl_tensor("t", "local_sum", scd_tl_begin(), NULL, 0);
	usleep(300 * 1000); /* the writer flushes every 10 ms */
	char buf[4096];
	unit_stderr_read(&cap, buf, sizeof(buf));
	CHECK_EQ_INT(scd_tl_stop(NULL), SC_ERR_SYSTEM);
	setrlimit(RLIMIT_FSIZE, &was);
	CHECK_MSG(strstr(buf, path) && strstr(buf, "writing failed: File too large"),
		  "nothing logged while the timeline ran: '%s'", buf);
	unlink(path);
}
