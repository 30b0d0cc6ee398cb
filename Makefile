# SPDX-License-Identifier: GPL-2.0
# kstall — `make run` runs the default kernel matrix, `make test` the test suite.
# Both install whatever Debian packages are missing first (ci/install-deps).

PYTHON  ?= /usr/bin/python3
comma   := ,
empty   :=
space   := $(empty) $(empty)
BUILD   ?= build
# the guest's architecture (harness/base/arches.toml): the host's unless named;
# its compiler on this host, GNU triplet and BPF target come from the table
GUEST_ARCH ?= $(shell uname -m)
# (kstall passes them itself: the Python this asks took 0.1 s of every verify's make -q)
ifeq ($(origin TRIPLET),undefined)
$(foreach v,$(shell $(PYTHON) -m harness.base.arch make-vars $(GUEST_ARCH)),$(eval $(v)))
endif
GUEST   := $(BUILD)/guest/$(GUEST_ARCH)
# another architecture's static libraries (libbpf, libelf, zlib, zstd, jemalloc),
# unpacked from Debian's packages (images/guest/sysroot.py); the host's own otherwise
SYSROOT ?=
SYSROOT_FLAGS := $(if $(SYSROOT),-I$(SYSROOT)/usr/include -I$(SYSROOT)/usr/include/$(TRIPLET) \
	-L$(SYSROOT)/usr/lib/$(TRIPLET))
KSELFTEST := $(BUILD)/kselftest
# the binaries' debug info must not name the checkout: the initramfs, and so
# every snapshot, is keyed on their bytes, and a clone at a new path would boot
# every kernel afresh
NO_BUILD_PATH := -ffile-prefix-map=$(CURDIR)=.
include repro/cflags.mk
GUEST_CFLAGS := $(GUEST_CFLAGS_ALL) $(GUEST_CFLAGS_OWN) $(NO_BUILD_PATH) -I$(KSELFTEST) $(SYSROOT_FLAGS)
KSTALL  := harness/kstall
PYTEST_ARGS ?=
# syzkaller's golden console-report corpus (its file format), for `make bench`
SYZ_REPORTS ?= ../shared/syzkaller-reports/linux

REPROS  := perf-refresh perf-sigtrap futex-requeue-pi bpf-ringbuf bpf-timer signal-malloc signal-malloc-jemalloc console-trigger
# the asm/ headers: the host's multiarch directory, or the cross toolchain's
# the guest's byte order (arches.toml `byteorder`): bpfel, or bpfeb for s390x
BPF_ENDIAN ?= bpfel
BPF_CFLAGS := -O2 -g $(NO_BUILD_PATH) -target $(BPF_ENDIAN) -D__TARGET_ARCH_$(BPF_TARGET) -I/usr/include/$(TRIPLET) \
	-I/usr/$(TRIPLET)/include -Irepro -Wall -Werror

# a compiler or linker that dies leaves no half-written binary for the next make to take as built
.DELETE_ON_ERROR:

.PHONY: all deps guest run test unit e2e bench check-bisect check-selftest check-cold clean help man deb check-install check-autopkgtest check-ci

all: guest

help:
	@echo "make run     install missing packages, run the default matrix, print the verdict table"
	@echo "make test    install missing packages, run the whole test suite (unit + end-to-end)"
	@echo "make unit    unit tests only (no guest boots)"
	@echo "make guest   build the static guest binaries into $(GUEST)/ (GUEST_ARCH=aarch64: arm64's)"
	@echo "make bench   print speed figures (medians over several runs)"
	@echo "make man     kstall(1) into $(BUILD)/man/, from the argparse definitions --help prints"
	@echo "make deb     kstall_<version>_<arch>.deb into $(BUILD)/deb/ (ci/build_deb.py)"
	@echo "make check-install  the package installed in a clean bookworm root, run as a user (minutes; root)"
	@echo "make check-autopkgtest  the package's own autopkgtest (null virt server: on this host; about a minute)"
	@echo "make check-ci  the GitHub, GitLab and LAVA templates' jobs rehearsed in a clean root, against make run (root)"
	@echo "make check-bisect  git-bisect real kernel builds to a planted perf deadlock (6-12 min cold)"
	@echo "make check-selftest  build perf-refresh as a selftest in Debian's 6.17.8 tree, run it under the kselftest runner"
	@echo "make check-cold  the whole suite on an empty cache, as a new machine meets it (long; not in make test)"

# supermin (libguestfs's appliance builder) copies the host's /lib/modules,
# which a host without an installed kernel lacks: an empty one will do
deps:
	@ci/install-deps
	@[ -d /lib/modules ] || { [ "$$(id -u)" -eq 0 ] && mkdir -p /lib/modules; } || \
		echo "kstall: image: kernels need a /lib/modules directory: sudo mkdir /lib/modules" >&2

# what the host cannot build for the guest's architecture (arches.toml `unbuildable`):
# those reproducers are INCONCLUSIVE there before boot
GUEST_SKIP ?=
guest: $(GUEST)/init $(addprefix $(GUEST)/,$(filter-out $(subst $(comma),$(space),$(GUEST_SKIP)),$(REPROS)))

$(GUEST):
	@mkdir -p $@

# the kernel's kselftest.h, from Debian's linux orig tarball (repro/selftest/kselftest.toml
# pins the version and the hashes; the tarball is downloaded once into the cache)
KSELFTEST_H := $(KSELFTEST)/kselftest.h
$(KSELFTEST_H): repro/selftest/kselftest.toml images/guest/kselftest.py
	$(PYTHON) -m images.guest.kselftest headers $(KSELFTEST)
REPRO_H := repro/repro.h $(KSELFTEST_H) repro/cflags.mk

# the guest agent: a folder of small files, one per job (repro/agent/agent.h says what each offers)
AGENT_SRC := $(wildcard repro/agent/*.c)
$(GUEST)/init: $(AGENT_SRC) repro/agent/agent.h repro/cflags.mk | $(GUEST)
	$(GUEST_CC) $(GUEST_CFLAGS) -o $@ $(AGENT_SRC) -lpthread

$(GUEST)/perf-refresh: repro/perf_refresh.c $(REPRO_H) | $(GUEST)
	$(GUEST_CC) $(GUEST_CFLAGS) -o $@ $< -lpthread

$(GUEST)/perf-sigtrap: repro/perf_sigtrap.c $(REPRO_H) | $(GUEST)
	$(GUEST_CC) $(GUEST_CFLAGS) -o $@ $< -lpthread

$(GUEST)/futex-requeue-pi: repro/futex_requeue_pi.c $(REPRO_H) | $(GUEST)
	$(GUEST_CC) $(GUEST_CFLAGS) -o $@ $< -lpthread

$(GUEST)/signal-malloc: repro/signal_malloc.c $(REPRO_H) | $(GUEST)
	$(GUEST_CC) $(GUEST_CFLAGS) -o $@ $< -lpthread

$(GUEST)/console-trigger: repro/console_trigger.c $(REPRO_H) | $(GUEST)
	$(GUEST_CC) $(GUEST_CFLAGS) -o $@ $< -lpthread

# the same source on Debian's static jemalloc (libjemalloc-dev), which takes
# over malloc in a static link
$(GUEST)/signal-malloc-jemalloc: repro/signal_malloc.c $(REPRO_H) | $(GUEST)
	$(GUEST_CC) $(GUEST_CFLAGS) -DKSTALL_JEMALLOC -o $@ $< -l:libjemalloc.a -lpthread -lm -ldl

# BPF object -> libbpf skeleton -> static loader (objects stay out of the initramfs).
# A skeleton is named after its object, except bpf_timer's: "bpf_timer" is the
# kernel's own struct for a BPF timer.
SKEL_NAME_bpf_timer := timer_pair

$(GUEST)/obj/%.bpf.o: repro/%.bpf.c repro/%.h
	@mkdir -p $(@D)
	clang $(BPF_CFLAGS) -c $< -o $@

ifeq ($(BPF_ENDIAN),bpfel)
$(GUEST)/obj/%.skel.h: $(GUEST)/obj/%.bpf.o
	bpftool gen skeleton $< name $(or $(SKEL_NAME_$*),$*) > $@.tmp && mv $@.tmp $@
else
# the host's bpftool opens no big-endian object: the skeleton's code from the
# little-endian build, carrying the big-endian object (images/guest/skeleton.py)
$(GUEST)/obj/%.le.o: repro/%.bpf.c repro/%.h
	@mkdir -p $(@D)
	clang $(BPF_CFLAGS) -target bpfel -c $< -o $@

$(GUEST)/obj/%.skel.h: $(GUEST)/obj/%.bpf.o $(GUEST)/obj/%.le.o images/guest/skeleton.py
	bpftool gen skeleton $(GUEST)/obj/$*.le.o name $(or $(SKEL_NAME_$*),$*) > $@.le.tmp
	$(PYTHON) -m images.guest.skeleton $@.le.tmp $< > $@.tmp && mv $@.tmp $@ && rm -f $@.le.tmp
endif

# what a newer suite's libraries need from an older cross libc (arches.toml `link_shim`)
LINK_SHIM ?=
BPF_LOADER = $(GUEST_CC) $(GUEST_CFLAGS) -I$(GUEST)/obj -Irepro -o $@ $< $(LINK_SHIM) -lbpf -lelf -lz -lzstd -lpthread

$(GUEST)/bpf-ringbuf: repro/bpf_ringbuf.c repro/bpf_ringbuf.h repro/bpf_repro.h $(REPRO_H) $(GUEST)/obj/bpf_ringbuf.skel.h $(LINK_SHIM) | $(GUEST)
	$(BPF_LOADER)

$(GUEST)/bpf-timer: repro/bpf_timer.c repro/bpf_timer.h repro/bpf_repro.h $(REPRO_H) $(GUEST)/obj/bpf_timer.skel.h $(LINK_SHIM) | $(GUEST)
	$(BPF_LOADER)

run: deps
	@$(MAKE) --no-print-directory guest
	$(PYTHON) $(KSTALL) matrix ci/matrix.toml

test: deps
	@ci/install-npm-tools
	@$(MAKE) --no-print-directory guest
	$(PYTHON) tests/run_suite.py $(PYTEST_ARGS)

unit: deps
	@ci/install-npm-tools
	@$(MAKE) --no-print-directory guest
	$(PYTHON) -m pytest -q -m "not e2e" $(PYTEST_ARGS) tests

bench: deps
	@$(MAKE) --no-print-directory guest
	$(PYTHON) tests/bench/verify_speed.py
	$(PYTHON) tests/bench/matrix_speed.py
	$(PYTHON) tests/bench/bpf_ringbuf_speed.py
	$(PYTHON) tests/bench/bisect_prefetch.py
	$(PYTHON) tests/bench/distro_specs.py
	$(PYTHON) tests/bench/signal_malloc_speed.py
	$(PYTHON) tests/bench/fault_speed.py
	$(PYTHON) tests/bench/snapshot_speed.py
	$(PYTHON) tests/bench/arm64_speed.py
	$(PYTHON) tests/bench/more_arches_speed.py
	$(PYTHON) tests/bench/boot_profile.py
	$(PYTHON) tests/bench/user_reproducers.py
	$(PYTHON) tests/bench/handover_speed.py
	$(PYTHON) tests/bench/wait_graph.py
	@if [ -d "$(SYZ_REPORTS)" ]; then $(PYTHON) tests/bench/syzkaller_reports.py $(SYZ_REPORTS) --misses 0; \
	else echo "kstall: bench: no syzkaller report corpus at $(SYZ_REPORTS) (set SYZ_REPORTS=DIR)"; fi

# Not part of `make test`: a cold run builds a kernel (3-6 minutes on 2 cores; 6-12 minutes in all)
check-bisect: deps
	@ci/install-deps ci/debian-packages-build.txt
	@$(MAKE) --no-print-directory guest
	$(PYTHON) tests/check_bisect.py $(CHECK_BISECT_ARGS)

# also run by `make test` (tests/e2e/test_selftest.py)
check-selftest: deps
	@$(MAKE) --no-print-directory guest
	$(PYTHON) tests/check_selftest.py

# the man page and --help come from one parser (harness/cli.py build_parser)
man: deps
	@mkdir -p $(BUILD)/man
	PYTHONPATH=$(CURDIR) argparse-manpage --module harness.cli --function build_parser --project-name kstall \
		--url https://kstall.invalid --output $(BUILD)/man/kstall.1

deb: deps
	@$(MAKE) --no-print-directory guest
	$(PYTHON) ci/build_deb.py

# Not part of `make test`: every kernel, symbol capture and snapshot made afresh
check-cold: deps
	@ci/install-npm-tools
	@$(MAKE) --no-print-directory guest
	$(PYTHON) tests/check_cold.py $(PYTEST_ARGS)

# Not part of `make test`: a clean root and its packages take minutes
check-install: deps
	@$(MAKE) --no-print-directory guest
	$(PYTHON) tests/check_install.py

check-autopkgtest: deps
	@$(MAKE) --no-print-directory guest
	$(PYTHON) tests/check_autopkgtest.py

# Not part of `make test`: the default matrix runs four times (make run, and the
# GitHub, GitLab and LAVA templates' jobs in a clean root)
check-ci: deps
	@ci/install-npm-tools
	@$(MAKE) --no-print-directory guest
	$(PYTHON) tests/check_ci.py

clean:
	rm -rf $(BUILD)
