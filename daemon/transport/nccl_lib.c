/*
 * nccl_lib.c: loading NCCL at run time (nccl_lib.h).
 */
#include "transport/nccl_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/wheel.h"
#include "util/log.h"

/* The non-blocking communicators (ncclCommInitRankConfig with blocking = 0). */
#define NCCL_MIN_VERSION 21400

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static sc_status_t load_status = SC_ERR_UNSUPPORTED;
static char load_reason[1024] = "NCCL was never asked for";
static scd_nccl_api_t api;

/* The candidates, in order: $SPARSECOMM_NCCL_LIB alone when set; else the loader's own
 * search (libnccl.so.2), the nvidia-nccl wheel of the Python that trainers run (wheel.h),
 * and the CUDA toolkit's copy the build found. */
static int candidates(char (*cands)[SCD_WHEEL_PATH_MAX], int max)
{
	const char *env = getenv("SPARSECOMM_NCCL_LIB");
	int n = 0;
	if (env && *env) {
		snprintf(cands[n++], SCD_WHEEL_PATH_MAX, "%s", env); /* nothing else is tried */
		return n;
	}
	snprintf(cands[n++], SCD_WHEEL_PATH_MAX, "libnccl.so.2");
	n += scd_wheel_find("nvidia/nccl/lib/libnccl.so.2", cands + n, max - n - 1);
#ifdef SCD_NCCL_LIB_DIR
	snprintf(cands[n++], SCD_WHEEL_PATH_MAX, "%s", SCD_NCCL_LIB_DIR "/libnccl.so.2");
#endif
	return n;
}

static void *open_lib(char *tried, size_t cap)
{
	char cands[6][SCD_WHEEL_PATH_MAX];
	int n = candidates(cands, 6);
	size_t used = 0;
	tried[0] = '\0';
	for (int i = 0; i < n; i++) {
		void *lib = dlopen(cands[i], RTLD_NOW | RTLD_LOCAL);
		if (lib) {
			memcpy(api.path, cands[i],
			       sizeof api.path); /* both SCD_WHEEL_PATH_MAX */
			return lib;
		}
		const char *e = dlerror();
		int w = snprintf(tried + used, cap - used, "%s%s", used ? "; " : "",
				 e ? e : cands[i]);
		if (w > 0)
			used = (size_t)w >= cap - used ? cap - 1 : used + (size_t)w;
	}
	return NULL;
}

static void load(void)
{
	char tried[960];
	void *lib = open_lib(tried, sizeof tried);
	if (!lib) {
		snprintf(load_reason, sizeof load_reason, "cannot load NCCL: %s", tried);
		goto out;
	}
#define SCD_NCCL_SYM_(field, sym)                                                              \
	if (!(*(void **)&api.field = dlsym(lib, #sym))) {                                      \
		snprintf(load_reason, sizeof load_reason, "%s has no %s", api.path, #sym);     \
		goto fail;                                                                     \
	}
	SCD_NCCL_API(SCD_NCCL_SYM_)
#undef SCD_NCCL_SYM_
	if (api.GetVersion(&api.version) != ncclSuccess || api.version < NCCL_MIN_VERSION) {
		snprintf(load_reason, sizeof load_reason,
			 "%s is NCCL %d, older than the non-blocking communicators (%d)",
			 api.path, api.version, NCCL_MIN_VERSION);
		goto fail;
	}
	load_status = SC_OK;
	load_reason[0] = '\0';
	scd_debug(SCD_SUB_TRANSPORT, "nccl: %s, version %d", api.path, api.version);
	return;
fail:
	dlclose(lib);
out:
	scd_debug(SCD_SUB_TRANSPORT, "nccl: unavailable: %s", load_reason);
}

sc_status_t scd_nccl_api_get(const scd_nccl_api_t **api_p)
{
	pthread_once(&load_once, load);
	if (load_status != SC_OK)
		return load_status;
	*api_p = &api;
	return SC_OK;
}

const char *scd_nccl_unavailable_reason(void)
{
	pthread_once(&load_once, load);
	return load_reason;
}
