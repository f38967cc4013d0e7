# sparsecomm: top-level build. `make` builds everything into build/; `make test` runs the
# unit and integration tests; `make demo` runs the example training on 4 local nodes.
# Missing Debian packages are installed first (mk/deps.sh, also `make deps`).

PREFIX ?= /usr/local
DESTDIR ?=
# Where `make install` puts what the system looks up elsewhere than under PREFIX: the
# configuration, systemd's units and sysusers.d (systemd's own directories when its
# pkg-config file says, else under PREFIX, which systemd also searches), and the Python
# package (the site-packages or dist-packages under PREFIX that python3 searches,
# mk/python_site.py).
SYSCONFDIR ?= /etc
SYSTEMD_UNIT_DIR ?= $(or $(shell pkg-config --variable=systemdsystemunitdir systemd \
	2>/dev/null),$(PREFIX)/lib/systemd/system)
SYSUSERS_DIR ?= $(or $(shell pkg-config --variable=sysusersdir systemd 2>/dev/null),\
	$(PREFIX)/lib/sysusers.d)
PYTHON_SITE ?= $(shell python3 mk/python_site.py '$(PREFIX)' 2>/dev/null)
MAN_DIR ?= $(PREFIX)/share/man
BUILD := build
GEN := $(BUILD)/gen
OBJ := $(BUILD)/obj
BIN := $(BUILD)/bin
LIB := $(BUILD)/lib
VERSION := 0.1.0

CC ?= cc
MPICC ?= mpicc
OPT ?= -O3 -march=x86-64-v2
CFLAGS ?= $(OPT) -g
CPPFLAGS += -D_GNU_SOURCE -DSC_VERSION_STRING=\"$(VERSION)\"
# Include paths per component: proto/ holds what the daemon and the client library share
# (the control protocol, the shared-memory layout, the status tables); neither sees the
# other's private headers.
INC_SHARED := -Iclient/include -I$(GEN) -Iproto
INC_DAEMON := $(INC_SHARED) -Idaemon -Igpu
INC_CLIENT := $(INC_SHARED) -Iclient/lib
WARN := -Wall -Wextra -Wno-unused-parameter -Wshadow -Wstrict-prototypes
ALL_CFLAGS = -std=gnu11 -pthread -fPIC -MMD -MP $(WARN) $(CFLAGS)
LDLIBS_DAEMON := -luv -lzmq -lsodium -lprotobuf-c -lpthread -lm -ldl
LDLIBS_CLIENT := -lzmq -lprotobuf-c -lpthread -lrt -lm -ldl
# Every program and shared library finds the libraries beside it first: programs in
# ../lib, libraries in their own directory. DT_RPATH (not the newer DT_RUNPATH) because the
# loader also searches it for the dependencies' own dependencies (libzmq's libsodium, ...),
# which is what makes the relocatable package (`make dist`, mk/dist.sh) need no
# LD_LIBRARY_PATH. In build/ these directories hold no system library, so nothing changes.
RPATH_BIN := -Wl,--disable-new-dtags -Wl,-rpath,'$$ORIGIN/../lib'
RPATH_LIB := -Wl,--disable-new-dtags -Wl,-rpath,'$$ORIGIN'

# `make` with no target builds everything.
.DEFAULT_GOAL := all

# Installing missing packages happens once per build, before anything compiles.
DEPS_STAMP := $(BUILD)/.deps-ok
$(DEPS_STAMP): mk/deps.sh
	@mkdir -p $(BUILD)
	@sh mk/deps.sh
	@touch $@

.PHONY: all deps test unit integration demo bench install print-python-site uninstall clean format format-check \
	dist
all: $(BIN)/sparsecommd $(BIN)/sparsectl $(BIN)/sparsecomm-run $(LIB)/libsparseclient.so \
     $(LIB)/libsparseclient.a $(BIN)/sparsecomm-unit $(BIN)/sparsecomm-itest \
     $(BIN)/sparsecomm-bench $(BIN)/sparsecomm-cbow $(LIB)/pkgconfig/sparsecomm.pc \
     $(BIN)/sparsecomm-mpi-peer $(LIB)/libcuda-host.so

deps:
	sh mk/deps.sh

# ---- protocol ------------------------------------------------------------------------
# One rule with grouped targets (&:): protoc-c runs once, also under make -j.
$(GEN)/sparsecomm.pb-c.c $(GEN)/sparsecomm.pb-c.h &: proto/sparsecomm.proto $(DEPS_STAMP)
	@mkdir -p $(GEN)
	protoc-c --c_out=$(GEN) -Iproto proto/sparsecomm.proto
PROTO_OBJ := $(OBJ)/gen/sparsecomm.pb-c.o

# ---- object rules --------------------------------------------------------------------
# Each object's include path is its component's (INC, set per folder below).
$(OBJ)/gen/%.o: $(GEN)/%.c
	@mkdir -p $(dir $@)
	$(CC) $(INC_SHARED) $(CPPFLAGS) $(ALL_CFLAGS) -c $< -o $@
$(OBJ)/%.o: %.c $(GEN)/sparsecomm.pb-c.h
	@mkdir -p $(dir $@)
	$(CC) $(INC) $(CPPFLAGS) $(ALL_CFLAGS) -c $< -o $@
# Library objects export only the sc_* API.
$(OBJ)/lib/%.o: %.c $(GEN)/sparsecomm.pb-c.h
	@mkdir -p $(dir $@)
	$(CC) $(INC_CLIENT) $(CPPFLAGS) -DSC_BUILDING_LIBRARY -fvisibility=hidden $(ALL_CFLAGS) \
		-c $< -o $@
$(OBJ)/daemon/%.o $(OBJ)/proto/%.o $(OBJ)/tests/unit/%.o $(OBJ)/bench/%.o: INC := $(INC_DAEMON)
$(OBJ)/client/%.o: INC := $(INC_CLIENT)
$(OBJ)/tests/integration/%.o: INC := $(INC_SHARED)
# the one integration test of the library's internals (its CUDA driver plumbing)
$(OBJ)/tests/integration/itest_cudadrv.o: INC := $(INC_CLIENT) -Igpu
$(OBJ)/tests/integration/itest_cudafake.o: INC := $(INC_SHARED) -Igpu
$(OBJ)/examples/%.o: INC := -Iclient/include
# the model command's KJV profile and the collective benchmark's KJV workload read the text
# through the CBOW example's corpus
$(OBJ)/bench/profile.o $(OBJ)/bench/collective.o: INC := $(INC_DAEMON) -Iexamples/cbow

# ---- pure algorithm core (no I/O): util, device, model -> libsccore.a ----------------------
CORE_SRC := $(wildcard daemon/util/*.c daemon/device/*.c daemon/model/*.c) proto/common.c \
	proto/place.c
CORE_OBJ := $(CORE_SRC:%.c=$(OBJ)/%.o)
$(LIB)/libsccore.a: $(CORE_OBJ)
	@mkdir -p $(LIB)
	rm -f $@ && ar rcs $@ $^

# ---- GPU device (gpu/*.cu; docs/design.md, devices) ---------------------------------------
# Every gpu/*.cu builds twice, one object per source (-j friendly):
#  - by nvcc into $(LIB)/libsparsecomm-cuda.so, which the daemon loads at run time only
#    when a GPU buffer asks for the cuda device (daemon/device/cuda.c); built by `make`
#    whenever nvcc is found (NVCC=... names another, CUDA_ARCH other GPUs);
#  - by the host C++ compiler with Thrust's OpenMP backend (-DSCG_HOST) into
#    $(LIB)/libscgpu-host.a, which the unit runner links, so that every machine with the
#    CUDA toolkit's headers (CCCL) tests the GPU algorithms against the cpu device.
# CORE_ONLY=1 builds neither.
NVCC ?= $(shell command -v nvcc 2>/dev/null)
CUDA_HOME ?= $(if $(NVCC),$(abspath $(dir $(realpath $(NVCC)))/..),/usr/local/cuda)
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCC_OPT ?= -O3
CCCL_INC ?= $(firstword $(wildcard $(CUDA_HOME)/include/cccl /usr/local/cuda/include/cccl))
CXX_HOST ?= g++
GPU_HOST_CFLAGS ?= $(CFLAGS)
GPU_SRC := $(wildcard gpu/*.cu)
GPU_INC := -Igpu -Iclient/include
GPU_HOST_OBJ := $(GPU_SRC:gpu/%.cu=$(OBJ)/gpu-host/%.o)
GPU_CUDA_OBJ := $(GPU_SRC:gpu/%.cu=$(OBJ)/gpu-cuda/%.o)
GPU_HOST_LDLIBS := -fopenmp -lstdc++
ifneq ($(CORE_ONLY),1)
GPU_HOST := $(if $(CCCL_INC),yes,)
GPU_CUDA := $(if $(NVCC),yes,)
endif
$(OBJ)/gpu-host/%.o: gpu/%.cu gpu/scg.h gpu/scg_types.h gpu/portable.cuh gpu/scg_host_ipc.h
	@mkdir -p $(dir $@)
	$(CXX_HOST) -x c++ -std=c++17 -DSCG_HOST -DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP \
		-fopenmp -fPIC -MMD -MP -Wall -Wextra -Wno-unused-parameter $(GPU_HOST_CFLAGS) $(GPU_INC) \
		-isystem $(CCCL_INC) -isystem $(CUDA_HOME)/include -c $< -o $@
$(LIB)/libscgpu-host.a: $(GPU_HOST_OBJ)
	@mkdir -p $(LIB)
	rm -f $@ && ar rcs $@ $^
# The host build as the daemon's GPU library: tests point $$SPARSECOMM_CUDA_LIB at it, so
# that daemons on machines without a GPU run the cuda device, CUDA IPC stood in by POSIX
# shared memory (gpu/ipc.cu, gpu/scg_host_ipc.h), end to end.
$(LIB)/libsparsecomm-cuda-host.so: $(GPU_HOST_OBJ)
	@mkdir -p $(LIB)
	$(CXX_HOST) -shared -fopenmp $^ -o $@ -lrt $(if $(findstring sanitize,$(GPU_HOST_CFLAGS)),,-Wl,-z,defs)
$(OBJ)/gpu-cuda/%.o: gpu/%.cu gpu/scg.h gpu/scg_types.h gpu/portable.cuh
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 $(NVCC_OPT) -g $(CUDA_ARCH) -Xcompiler -fPIC,-Wall -MMD -MP \
		$(GPU_INC) -c $< -o $@
# The CUDA runtime is linked in statically (libcudart_static.a): the library needs the
# driver (libcuda.so.1) alone, not the toolkit it was built with.
$(LIB)/libsparsecomm-cuda.so: $(GPU_CUDA_OBJ)
	@mkdir -p $(LIB)
	$(NVCC) -shared $(CUDA_ARCH) $^ -o $@ -cudart static -L$(CUDA_HOME)/lib64 \
		-lpthread -ldl -lrt -Xlinker -z,defs
.PHONY: gpu-note test-gpu
gpu-note:
	@echo "gpu: nvcc not found, the CUDA device is not built"
GPU_ALL := $(if $(GPU_CUDA),$(LIB)/libsparsecomm-cuda.so,$(if $(filter 1,$(CORE_ONLY)),,gpu-note)) \
	   $(if $(GPU_HOST),$(LIB)/libsparsecomm-cuda-host.so)
all: $(GPU_ALL)

# ---- daemon internals (the other daemon/ folders, main.c apart) -> libscd.a ----------------
DAEMON_SRC := $(filter-out daemon/main.c $(CORE_SRC),$(wildcard daemon/*.c daemon/*/*.c))
# The nccl transport (daemon/transport/nccl*.c) compiles against the CUDA toolkit's nccl.h
# and loads libnccl.so.2 at run time, so the daemon links nothing of NCCL or CUDA; without
# the header it is left out, and `transport = nccl` reports that it is not built.
NCCL_H ?= $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
NCCL_LIB_DIR ?= $(patsubst %/,%,$(dir $(firstword $(wildcard $(CUDA_HOME)/lib/libnccl.so.2 \
		$(CUDA_HOME)/lib64/libnccl.so.2))))
# (the system's include directory is never added with -isystem: it breaks #include_next;
# cuda_runtime.h, which nccl.h includes, comes from the toolkit)
NCCL_DIR := $(patsubst %/,%,$(dir $(NCCL_H)))
NCCL_CFLAGS := $(if $(NCCL_H),$(if $(filter /usr/include,$(NCCL_DIR)),,-isystem $(NCCL_DIR)) \
	       -isystem $(CUDA_HOME)/include) \
	       $(if $(NCCL_LIB_DIR),-DSCD_NCCL_LIB_DIR=\"$(NCCL_LIB_DIR)\")
ifeq ($(NCCL_H),)
DAEMON_SRC := $(filter-out daemon/transport/nccl%.c,$(DAEMON_SRC))
endif
$(OBJ)/daemon/transport/nccl%: INC := $(INC_DAEMON) $(NCCL_CFLAGS)
$(BUILD)/obj-fuzz/daemon/transport/nccl%: NCCL_FUZZ := $(NCCL_CFLAGS)
$(OBJ)/daemon/transport/transport.o: INC := $(INC_DAEMON) $(if $(NCCL_H),-DSCD_HAVE_NCCL)
# what this build has (sc_built): the nccl transport where nccl.h was found, the CUDA device
# library where nvcc was
$(OBJ)/lib/client/lib/client.o: CPPFLAGS += \
	-DSC_BUILT_FEATURES='"tcp$(if $(NCCL_H), nccl)$(if $(GPU_CUDA), cuda)"'
$(BUILD)/obj-fuzz/daemon/transport/transport.o: NCCL_FUZZ := $(if $(NCCL_H),-DSCD_HAVE_NCCL)
DAEMON_OBJ := $(DAEMON_SRC:%.c=$(OBJ)/%.o) $(PROTO_OBJ)
$(LIB)/libscd.a: $(DAEMON_OBJ)
	@mkdir -p $(LIB)
	rm -f $@ && ar rcs $@ $^
$(BIN)/sparsecommd: $(OBJ)/daemon/main.o $(LIB)/libscd.a $(LIB)/libsccore.a
	@mkdir -p $(BIN)
	$(CC) $(ALL_CFLAGS) $^ -o $@ $(RPATH_BIN) $(LDLIBS_DAEMON)

# ---- client library ----------------------------------------------------------------------
CLIENT_SRC := $(wildcard client/lib/*.c) proto/common.c proto/place.c
CLIENT_OBJ := $(CLIENT_SRC:%.c=$(OBJ)/lib/%.o) $(OBJ)/lib/gen.o
$(OBJ)/lib/gen.o: $(GEN)/sparsecomm.pb-c.c
	@mkdir -p $(dir $@)
	$(CC) $(INC_SHARED) $(CPPFLAGS) -DSC_BUILDING_LIBRARY -fvisibility=hidden $(ALL_CFLAGS) -c $< -o $@
$(LIB)/libsparseclient.a: $(CLIENT_OBJ)
	@mkdir -p $(LIB)
	rm -f $@ && ar rcs $@ $^
$(LIB)/libsparseclient.so: $(CLIENT_OBJ)
	@mkdir -p $(LIB)
	$(CC) -shared -Wl,-soname,libsparseclient.so.0 $(ALL_CFLAGS) $^ -o $@ $(RPATH_LIB) \
		$(LDLIBS_CLIENT)
	ln -sf libsparseclient.so $(LIB)/libsparseclient.so.0
$(LIB)/pkgconfig/sparsecomm.pc: mk/sparsecomm.pc.in Makefile
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' $< > $@

# ---- tools -----------------------------------------------------------------------------
CTL_OBJ := $(patsubst %.c,$(OBJ)/%.o,$(wildcard client/ctl/*.c))
$(BIN)/sparsectl: $(CTL_OBJ) $(LIB)/libsparseclient.a
	@mkdir -p $(BIN)
	$(CC) $(ALL_CFLAGS) $^ -o $@ $(RPATH_BIN) $(LDLIBS_CLIENT)
RUN_OBJ := $(patsubst %.c,$(OBJ)/%.o,$(wildcard client/run/*.c))
$(BIN)/sparsecomm-run: $(RUN_OBJ)
	@mkdir -p $(BIN)
	$(CC) $(ALL_CFLAGS) $^ -o $@ $(RPATH_BIN) -lm

# ---- tests, benchmarks, examples ---------------------------------------------------------
# CORE_ONLY=1 builds the unit runner and the benchmark from the algorithm core alone
# (tests/unit/test_core_*.c, bench/compress*.c), without the daemon.
ifeq ($(CORE_ONLY),1)
UNIT_SRC := tests/unit/runner.c $(wildcard tests/unit/test_core_*.c)
UNIT_LIBS := $(LIB)/libsccore.a
BENCH_SRC := bench/main.c $(wildcard bench/compress*.c)
BENCH_LIBS := $(LIB)/libsccore.a
else
UNIT_SRC := $(wildcard tests/unit/*.c)
UNIT_LIBS := $(LIB)/libscd.a $(LIB)/libsccore.a
# the GPU algorithms' tests run on the host build (above) where it can be built
ifeq ($(GPU_HOST),yes)
UNIT_LIBS += $(LIB)/libscgpu-host.a
UNIT_LDLIBS := $(GPU_HOST_LDLIBS)
else
UNIT_SRC := $(filter-out tests/unit/test_gpu_%,$(UNIT_SRC))
endif
BENCH_SRC := $(wildcard bench/*.c) examples/cbow/corpus.c
BENCH_LIBS := $(LIB)/libscd.a $(LIB)/libsccore.a $(LIB)/libsparseclient.a
endif
UNIT_OBJ := $(UNIT_SRC:%.c=$(OBJ)/%.o)
$(BIN)/sparsecomm-unit: $(UNIT_OBJ) $(UNIT_LIBS)
	@mkdir -p $(BIN)
	$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDLIBS_DAEMON) $(UNIT_LDLIBS)
# The same tests/unit/test_gpu_*.c against the CUDA build (-DSCG_TEST_GPU), with a runner
# that skips every test, saying why, on a machine without a usable GPU (`make test-gpu`).
GPU_TEST_SRC := tests/unit/runner.c tests/unit/gpu/unit_gpu.c $(wildcard tests/unit/test_gpu_*.c)
GPU_TEST_OBJ := $(GPU_TEST_SRC:%.c=$(OBJ)/gpu-test/%.o)
$(OBJ)/gpu-test/%.o: %.c $(GEN)/sparsecomm.pb-c.h
	@mkdir -p $(dir $@)
	$(CC) $(INC_DAEMON) -Itests/unit $(CPPFLAGS) -DSCG_TEST_GPU $(ALL_CFLAGS) -c $< -o $@
$(BIN)/sparsecomm-unit-gpu: $(GPU_TEST_OBJ) $(LIB)/libscd.a $(LIB)/libsccore.a \
			    $(LIB)/libsparsecomm-cuda.so
	@mkdir -p $(BIN)
	$(CC) $(ALL_CFLAGS) $(GPU_TEST_OBJ) $(LIB)/libscd.a $(LIB)/libsccore.a -o $@ \
		-L$(LIB) -lsparsecomm-cuda $(RPATH_BIN) $(LDLIBS_DAEMON)
# Then torch's CUDA tensors through daemons serving the GPU with libsparsecomm-cuda.so and
# trainers on the real CUDA driver (tests/python/worker_gpu.py; skipped, saying why,
# where torch has no CUDA device).
ifeq ($(GPU_CUDA),yes)
test-gpu: $(BIN)/sparsecomm-unit-gpu all
	$(BIN)/sparsecomm-unit-gpu
	env -u SPARSECOMM_CUDA_LIB -u SPARSECOMM_CUDA_DRIVER sh tests/python/run.sh t_gpu
else
test-gpu:
	@echo "test-gpu: nvcc not found, the CUDA device is not built; GPU tests (unit and" \
		"Python) skipped"
endif
# A test stand-in for the CUDA driver over the host build's IPC handles (plain C; the
# library loads it through $SPARSECOMM_CUDA_DRIVER in tests, see tests/cudahost/driver.c).
$(LIB)/libcuda-host.so: tests/cudahost/driver.c gpu/scg_host_ipc.h
	@mkdir -p $(LIB)
	$(CC) -shared -fvisibility=hidden -Igpu $(CPPFLAGS) $(ALL_CFLAGS) $< -o $@ -lrt -lpthread
# A test stand-in for NCCL between processes over TCP on host memory (tests/ncclhost/
# nccl.c): the daemon's nccl transport loads it through $$SPARSECOMM_NCCL_LIB in tests.
# Built against nccl.h's declarations, so only where the header is found; its checker
# (tests/ncclhost/check.c) loads it by path.
NCCL_INC ?= $(NCCL_H)
NCCLHOST_SRC := $(addprefix tests/ncclhost/,nccl.c setup.c exec.c reduce.c)
NCCLHOST_CFLAGS = $(NCCL_CFLAGS) $(CPPFLAGS) $(ALL_CFLAGS)
$(LIB)/libnccl-host.so: $(NCCLHOST_SRC) tests/ncclhost/host.h
	@mkdir -p $(LIB)
	$(CC) -shared -fvisibility=hidden $(NCCLHOST_CFLAGS) $(NCCLHOST_SRC) -o $@ -lpthread -lm
$(BIN)/sparsecomm-ncclhost-check: tests/ncclhost/check.c
	@mkdir -p $(BIN)
	$(CC) $(NCCLHOST_CFLAGS) $< -o $@ -ldl
ifneq ($(NCCL_INC),)
all: $(LIB)/libnccl-host.so $(BIN)/sparsecomm-ncclhost-check
endif
ITEST_OBJ := $(patsubst %.c,$(OBJ)/%.o,$(wildcard tests/integration/*.c))
$(BIN)/sparsecomm-itest: $(ITEST_OBJ) $(LIB)/libsparseclient.a
	@mkdir -p $(BIN)
	$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDLIBS_CLIENT)
BENCH_OBJ := $(BENCH_SRC:%.c=$(OBJ)/%.o)
$(BIN)/sparsecomm-bench: $(BENCH_OBJ) $(BENCH_LIBS)
	@mkdir -p $(BIN)
	$(CC) $(ALL_CFLAGS) $^ -o $@ $(RPATH_BIN) $(LDLIBS_DAEMON) -lrt
$(BIN)/sparsecomm-mpi-peer: bench/mpi/mpi_peer.c bench/util.c bench/util.h $(DEPS_STAMP)
	@mkdir -p $(BIN)
	$(MPICC) -std=gnu11 -O2 -Wall -Wextra -D_GNU_SOURCE -Ibench bench/mpi/mpi_peer.c bench/util.c -o $@
CBOW_OBJ := $(patsubst %.c,$(OBJ)/%.o,$(wildcard examples/cbow/*.c))
$(BIN)/sparsecomm-cbow: $(CBOW_OBJ) $(LIB)/libsparseclient.so
	@mkdir -p $(BIN)
	$(CC) $(ALL_CFLAGS) $(CBOW_OBJ) -o $@ -L$(LIB) -lsparseclient -Wl,-rpath,'$$ORIGIN/../lib' -lm

# ---- fuzzing (fuzz/, docs/testing.md) ----------------------------------------------------
# One libFuzzer harness per decoder of untrusted input (fuzz/fuzz_<name>.c), linked against
# the daemon's sources built again by clang with ASan and UBSan into their own object dir,
# so nothing of it reaches the normal build. `make fuzz` runs each for FUZZ_SECONDS on a
# copy of its seed corpus (fuzz/corpus/<name>/); `make test` runs each for 20 s.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_OBJ := $(BUILD)/obj-fuzz
FUZZ_BIN := $(BUILD)/fuzz
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS := -std=gnu11 -pthread -g -O1 -fno-omit-frame-pointer -MMD -MP $(WARN) $(FUZZ_SAN)
FUZZ_NAMES := $(patsubst fuzz/fuzz_%.c,%,$(wildcard fuzz/fuzz_*.c))
FUZZ_BINS := $(FUZZ_NAMES:%=$(FUZZ_BIN)/fuzz_%)
FUZZ_LIB_OBJ := $(patsubst %.c,$(FUZZ_OBJ)/%.o,$(CORE_SRC) $(DAEMON_SRC)) \
		$(FUZZ_OBJ)/gen/sparsecomm.pb-c.o
$(FUZZ_OBJ)/gen/%.o: $(GEN)/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(INC_SHARED) $(CPPFLAGS) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_OBJ)/%.o: %.c $(GEN)/sparsecomm.pb-c.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(INC_DAEMON) $(NCCL_FUZZ) -Ifuzz $(CPPFLAGS) $(FUZZ_CFLAGS) \
		-fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_BIN)/libscd-fuzz.a: $(FUZZ_LIB_OBJ)
	@mkdir -p $(FUZZ_BIN)
	rm -f $@ && ar rcs $@ $^
$(FUZZ_BIN)/fuzz_%: $(FUZZ_OBJ)/fuzz/fuzz_%.o $(FUZZ_BIN)/libscd-fuzz.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $^ -o $@ $(LDLIBS_DAEMON)
# The seed corpora are written by fuzz/seeds.c from the daemon's own encoders (normal build).
$(OBJ)/fuzz/%.o: INC := $(INC_DAEMON)
$(FUZZ_BIN)/fuzz-seeds: $(OBJ)/fuzz/seeds.o $(LIB)/libscd.a $(LIB)/libsccore.a
	@mkdir -p $(FUZZ_BIN)
	$(CC) $(ALL_CFLAGS) $^ -o $@ $(LDLIBS_DAEMON)
.PHONY: fuzz fuzz-build fuzz-seeds
fuzz-seeds: $(FUZZ_BIN)/fuzz-seeds
	mkdir -p fuzz/corpus && $< fuzz/corpus
fuzz-build: $(FUZZ_BINS)
fuzz: fuzz-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz/run.sh

# ---- sanitizers (docs/design.md, testing) ------------------------------------------------
# `make test-sanitize`: the unit and integration suites on a build with ASan and UBSan. The
# sources (tracked and new, as git lists them) are copied into $(SAN_DIR)/src (its build/
# kept between runs), built there with SAN_CFLAGS, and the suites run from that copy, so
# their paths stay those of a normal tree and nothing of it reaches build/. The Python tests are left out
# (the interpreter would need the sanitizers' runtime preloaded).
SAN_DIR ?= $(BUILD)/sanitize
SAN_CFLAGS ?= -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
	      -fno-sanitize-recover=undefined
# the GPU device's host build goes without UBSan: Thrust's OpenMP backend binds references
# through null policy pointers in CCCL's own headers
SAN_GPU_CFLAGS ?= -O1 -g -fno-omit-frame-pointer -fsanitize=address
# tests that allocate past any memory on purpose get NULL; tests that trap host reads of
# guarded memory keep their own SIGSEGV handling
SAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1:handle_segv=0 \
	   UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ITEST_KILL_GRACE=30
.PHONY: test-sanitize
test-sanitize: $(DEPS_STAMP)
	mkdir -p $(SAN_DIR)/src && find $(SAN_DIR)/src -mindepth 1 -maxdepth 1 ! -name build \
		-exec rm -rf {} +
	git ls-files -co --exclude-standard -z | xargs -0 sh -c \
		'for f; do [ -e "$$f" ] && cp --parents -p "$$f" "$(SAN_DIR)/src/"; done; true' sh
	mkdir -p $(SAN_DIR)/src/build && cp -p $(DEPS_STAMP) $(SAN_DIR)/src/build/
	$(MAKE) -C $(SAN_DIR)/src NVCC= CORE_ONLY= CFLAGS="$(SAN_CFLAGS)" \
		GPU_HOST_CFLAGS="$(SAN_GPU_CFLAGS)" all
	cd $(SAN_DIR)/src && $(SAN_ENV) build/bin/sparsecomm-unit && \
		$(SAN_ENV) sh tests/integration/run.sh

# ---- the layer check (mk/layers.sh; docs/design.md, Layers) ---------------------------------
# Fails, naming the file, the line and the include, where an #include of daemon/ goes in a
# direction the rules forbid or the layers include each other in a circle; where build/
# has them, also where libscd.a uses what main.o defines. A second; it builds nothing.
# `make test` runs it first, and its own tests (tests/layers/run.sh) as a suite.
.PHONY: check-layers
check-layers:
	@sh mk/layers.sh

# ---- entry points ----------------------------------------------------------------------
# The harnesses are built for the bounded fuzz run only where clang is found; without it
# tests/fuzz/run.sh says why it skips.
test: all check-cuda-layer
	@$(MAKE) --no-print-directory check-layers
	@if command -v $(FUZZ_CC) >/dev/null 2>&1; then $(MAKE) --no-print-directory fuzz-build || \
		echo "fuzz: the harnesses did not build (above)"; \
	else echo "fuzz: $(FUZZ_CC) not found, the harnesses are not built"; fi
	sh tests/run.sh
unit: $(BIN)/sparsecomm-unit
	$(BIN)/sparsecomm-unit
integration: all
	sh tests/integration/run.sh
demo: all
	sh examples/cbow/demo.sh
bench: all
	@echo "see README.md, section Benchmarks"

# The directory `make install` puts the Python package in (run_install.sh checks it).
print-python-site:
	@echo '$(PYTHON_SITE)'
install: all
	@test -n "$(PYTHON_SITE)" || { echo "install: python3 not found: set PYTHON_SITE"; exit 1; }
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/share/sparsecomm \
		$(DESTDIR)$(SYSCONFDIR)/sparsecomm $(DESTDIR)$(SYSTEMD_UNIT_DIR) \
		$(DESTDIR)$(SYSUSERS_DIR) $(DESTDIR)$(MAN_DIR)/man1 $(DESTDIR)$(MAN_DIR)/man8 \
		$(DESTDIR)$(PYTHON_SITE)/sparsecomm
	install -m 0755 $(BIN)/sparsecommd $(BIN)/sparsectl $(BIN)/sparsecomm-run \
		$(DESTDIR)$(PREFIX)/bin/
	install -m 0755 $(LIB)/libsparseclient.so $(DESTDIR)$(PREFIX)/lib/libsparseclient.so.$(VERSION)
	ln -sf libsparseclient.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libsparseclient.so.0
	ln -sf libsparseclient.so.0 $(DESTDIR)$(PREFIX)/lib/libsparseclient.so
	install -m 0644 $(LIB)/libsparseclient.a $(DESTDIR)$(PREFIX)/lib/
	$(if $(GPU_CUDA),install -m 0755 $(LIB)/libsparsecomm-cuda.so $(DESTDIR)$(PREFIX)/lib/)
	install -m 0644 client/include/sparsecomm.h $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' mk/sparsecomm.pc.in \
		> $(DESTDIR)$(PREFIX)/lib/pkgconfig/sparsecomm.pc
	install -m 0644 config/sparsecommd.conf $(DESTDIR)$(PREFIX)/share/sparsecomm/
	@# an existing configuration is the operator's: never overwritten
	test -e $(DESTDIR)$(SYSCONFDIR)/sparsecomm/sparsecommd.conf || install -m 0644 \
		config/sparsecommd.conf $(DESTDIR)$(SYSCONFDIR)/sparsecomm/sparsecommd.conf
	for u in sparsecommd.service sparsecommd@.service; do \
		sed -e 's|/usr/local/bin/|$(PREFIX)/bin/|g' -e 's|/etc/sparsecomm/|$(SYSCONFDIR)/sparsecomm/|g' \
		systemd/$$u > $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$$u && chmod 0644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$$u; \
	done
	install -m 0644 systemd/sparsecomm.sysusers $(DESTDIR)$(SYSUSERS_DIR)/sparsecomm.conf
	install -m 0644 man/sparsectl.1 $(DESTDIR)$(MAN_DIR)/man1/
	install -m 0644 man/sparsecommd.8 $(DESTDIR)$(MAN_DIR)/man8/
	install -m 0644 client/python/sparsecomm/*.py $(DESTDIR)$(PYTHON_SITE)/sparsecomm/
	printf '# written by make install: where libsparseclient was installed\nLIBDIR = "%s"\n' \
		'$(PREFIX)/lib' > $(DESTDIR)$(PYTHON_SITE)/sparsecomm/_install.py
# The relocatable binary package for GPU nodes without build tools (mk/dist.sh,
# docs/gpu.md): $(DIST_TAR), unpacked anywhere, runs without LD_LIBRARY_PATH.
DIST_TAR := $(BUILD)/sparsecomm-$(VERSION)-$(shell uname -m).tar.gz
DIST_IN := $(BIN)/sparsecommd $(BIN)/sparsectl $(BIN)/sparsecomm-run $(BIN)/sparsecomm-bench \
	   $(LIB)/libsparseclient.so
ifeq ($(GPU_CUDA),yes)
dist: $(DIST_IN) $(LIB)/libsparsecomm-cuda.so $(BIN)/sparsecomm-unit-gpu
	sh mk/dist.sh $(BUILD) $(VERSION) $(DIST_TAR)
else
dist:
	@echo "dist: nvcc not found: the package carries the CUDA device, build it where nvcc is"
	@exit 1
endif
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/sparsecommd $(DESTDIR)$(PREFIX)/bin/sparsectl \
		$(DESTDIR)$(PREFIX)/bin/sparsecomm-run $(DESTDIR)$(PREFIX)/lib/libsparseclient.* \
		$(DESTDIR)$(PREFIX)/lib/libsparsecomm-cuda.so \
		$(DESTDIR)$(PREFIX)/include/sparsecomm.h \
		$(DESTDIR)$(PREFIX)/lib/pkgconfig/sparsecomm.pc \
		$(DESTDIR)$(SYSTEMD_UNIT_DIR)/sparsecommd.service \
		$(DESTDIR)$(SYSTEMD_UNIT_DIR)/sparsecommd@.service \
		$(DESTDIR)$(SYSUSERS_DIR)/sparsecomm.conf \
		$(DESTDIR)$(MAN_DIR)/man1/sparsectl.1 $(DESTDIR)$(MAN_DIR)/man8/sparsecommd.8
	rm -rf $(DESTDIR)$(PREFIX)/share/sparsecomm $(DESTDIR)$(PYTHON_SITE)/sparsecomm
	@echo "uninstall: $(SYSCONFDIR)/sparsecomm is the operator's and stays"
clean:
	rm -rf $(BUILD)
FORMAT_SRC = $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
format:
	clang-format -i $(FORMAT_SRC)
# Fails, naming the lines, when a file above daemon/device/ (the nccl transport apart)
# reaches the GPU device's own interface (device/cuda.h, scd_cuda_*), or a device is told
# apart by its name (mk/check_cuda_layer.sh; docs/design.md, devices).
.PHONY: check-cuda-layer
check-cuda-layer:
	@sh mk/check_cuda_layer.sh

# Fails, listing the files, when a source file is not formatted as .clang-format says.
format-check:
	@bad=$$(for f in $(FORMAT_SRC); do \
		clang-format --dry-run --Werror "$$f" >/dev/null 2>&1 || echo "$$f"; done); \
	if [ -n "$$bad" ]; then echo "format-check: not formatted (run make format):"; \
		echo "$$bad"; exit 1; fi; echo "format-check: ok"

-include $(shell find $(OBJ) $(FUZZ_OBJ) -name '*.d' 2>/dev/null)
