/*
 * compress_torch.c: torch.topk as the GPU top-k's peer (compress_torch.h). The tensor goes
 * to python3 through a file in a private temporary folder, the timing comes back as one
 * line; python3, torch or a CUDA device missing is a reason, not a failure.
 */
#include "compress_torch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char script[] =
    "import sys, time\n"
    "try:\n"
    "    import torch\n"
    "except Exception as e:\n"
    "    print('ERR python3 has no torch (%s)' % e); sys.exit(0)\n"
    "if not torch.cuda.is_available():\n"
    "    print('ERR torch sees no CUDA device'); sys.exit(0)\n"
    "path, n, k, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])\n"
    "g = torch.from_file(path, shared=False, size=n, dtype=torch.float32).cuda()\n"
    "torch.topk(g.abs(), k, sorted=False); torch.cuda.synchronize()\n"
    "best = float('inf')\n"
    "for _ in range(reps):\n"
    "    t0 = time.perf_counter()\n"
    "    torch.topk(g.abs(), k, sorted=False); torch.cuda.synchronize()\n"
    "    best = min(best, time.perf_counter() - t0)\n"
    "print('OK %.9g' % best)\n";

static int write_file(const char *path, const void *p, size_t bytes)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(p, 1, bytes, f);
	return fclose(f) == 0 && w == bytes ? 0 : -1;
}

void cb_torch_topk(const float *grad_host, uint64_t n, uint64_t k, int reps, cb_torch_t *out)
{
	memset(out, 0, sizeof *out);
	const char *tmp = getenv("TMPDIR");
	char dir[256], data[300], py[300], cmd[800], line[256] = "";
	snprintf(dir, sizeof dir, "%.200s/sparsecomm-torch-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		snprintf(out->why, sizeof out->why, "cannot create a temporary folder");
		return;
	}
	snprintf(data, sizeof data, "%s/grad.f32", dir);
	snprintf(py, sizeof py, "%s/topk.py", dir);
	if (write_file(data, grad_host, 4 * n) || write_file(py, script, strlen(script))) {
		snprintf(out->why, sizeof out->why, "cannot write the tensor to %s", dir);
		goto out;
	}
	snprintf(cmd, sizeof cmd, "timeout 600 python3 '%s' '%s' %llu %llu %d 2>/dev/null", py,
		 data, (unsigned long long)n, (unsigned long long)k, reps);
	FILE *p = popen(cmd, "r");
	if (!p) {
		snprintf(out->why, sizeof out->why, "cannot run python3");
		goto out;
	}
	char buf[256];
	while (fgets(buf, sizeof buf, p))
		snprintf(line, sizeof line, "%s", buf);
	int rc = pclose(p);
	line[strcspn(line, "\n")] = '\0';
	if (!strncmp(line, "OK ", 3)) {
		out->seconds = strtod(line + 3, NULL);
		out->ok = out->seconds > 0;
	}
	if (!out->ok)
		snprintf(out->why, sizeof out->why, "%s",
			 !strncmp(line, "ERR ", 4) ? line + 4
			 : rc != 0		   ? "python3 missing or failed"
						   : "no timing from python3");
out:
	unlink(data);
	unlink(py);
	rmdir(dir);
}
