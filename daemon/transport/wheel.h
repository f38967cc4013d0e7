/*
 * wheel.h: shared libraries that come in Python wheels. On GPU nodes NCCL is often there
 * only as the nvidia-nccl wheel PyTorch depends on (site-packages/nvidia/nccl/lib/
 * libnccl.so.2), in a virtual environment the loader knows nothing of. The daemon finds
 * the interpreter the way a shell would (python3 on $PATH, or the one $SPARSECOMM_PYTHON
 * names, first) and looks in its prefix's package directories.
 */
#ifndef SCD_TRANSPORT_WHEEL_H
#define SCD_TRANSPORT_WHEEL_H

#define SCD_WHEEL_PATH_MAX 512

/* Existing files <prefix>/lib/python3.N/{site,dist}-packages/REL and
 * <prefix>/local/lib/python3.N/dist-packages/REL, for the prefix (the interpreter's folder's
 * parent, symbolic links not followed, so that a virtual environment is its own prefix) of
 * $SPARSECOMM_PYTHON, then of every python3 on $PATH in order; each file once, by its real
 * path. Returns how many were written to out_p (at most max). */
int scd_wheel_find(const char *rel, char (*out_p)[SCD_WHEEL_PATH_MAX], int max);

#endif
