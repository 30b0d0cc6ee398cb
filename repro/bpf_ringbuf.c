// SPDX-License-Identifier: GPL-2.0
/* bpf-ringbuf: load the ringbuf programs, drive them, report latencies.
 *
 * Loads repro/bpf_ringbuf.bpf.c (skeleton), attaches tp_btf/sched_switch and
 * an NMI-context program: a perf_event program on hardware cycles when the
 * guest has a PMU, else tp_btf/nmi_handler, and then says "# nmi-source:
 * inject" so that the host injects NMIs (QMP inject-nmi), and "# nmi-source:
 * stop" once its count or time is reached. One pinned pipe
 * ping-pong pair per CPU makes context switches, and a consumer thread keeps
 * the ring from filling up. Progress counts the
 * NMI-context reserves: the evidence that the racy path was exercised.
 * At the end it prints per-CPU counters and log2 latency histograms as KTAP
 * diagnostics (format in repro/bpf-ringbuf.toml).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpf_ringbuf.h"
#include "bpf_ringbuf.skel.h"
#include "repro.h"
#include "bpf_repro.h"

static const char *const path_names[RB_PATHS] = { "sched_switch", "nmi" };
static const char *const stat_names[RB_STATS] = { "reserves", "nulls", "max_ns", "over", "sum_ns" };

struct options {
	double duration_s;
	unsigned long long count;
	unsigned reserves;
	unsigned ringbuf_mb;
	unsigned long long stall_ns[RB_PATHS];
	const char *nmi_source;
	unsigned perf_freq;
	int pairs;
	unsigned progress_ms;
};

static atomic_int stop;

struct pair {
	int cpu;
	int ab[2], ba[2];
};

/* two threads on one CPU passing a byte back and forth: two switches a trip */
static void *ping(void *arg)
{
	struct pair *p = arg;
	char c = 0;

	repro_pin_cpu(p->cpu);
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		if (write(p->ab[1], &c, 1) != 1 || read(p->ba[0], &c, 1) != 1)
			break;
	}
	close(p->ab[1]);
	return NULL;
}

static void *pong(void *arg)
{
	struct pair *p = arg;
	char c;

	repro_pin_cpu(p->cpu);
	while (read(p->ab[0], &c, 1) == 1)
		if (write(p->ba[1], &c, 1) != 1)
			break;
	close(p->ba[1]);
	return NULL;
}

static int on_record(void *ctx, void *data, size_t len)
{
	(void)ctx;
	(void)data;
	(void)len;
	return 0;
}

/* Discarded records keep their space until the consumer position passes
 * them: without a consumer the ring fills and every reserve fails fast. */
static void *consumer(void *arg)
{
	struct ring_buffer *rb = arg;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		ring_buffer__consume(rb);
		usleep(2000);
	}
	return NULL;
}

/* stats summed over CPUs (percpu != NULL: per CPU, [cpu][path][stat]) */
static int read_stats(int fd, int ncpus, unsigned long long tot[RB_PATHS][RB_STATS], unsigned long long *percpu)
{
	unsigned long long vals[ncpus];

	memset(tot, 0, sizeof(unsigned long long) * RB_PATHS * RB_STATS);
	for (__u32 key = 0; key < RB_PATHS * RB_STATS; key++) {
		int stat = key % RB_STATS;

		if (bpf_map_lookup_elem(fd, &key, vals))
			return -errno;
		for (int c = 0; c < ncpus; c++) {
			unsigned long long *t = &tot[key / RB_STATS][stat];

			if (stat == RB_MAX_NS)
				*t = vals[c] > *t ? vals[c] : *t;
			else
				*t += vals[c];
			if (percpu)
				percpu[(size_t)c * RB_PATHS * RB_STATS + key] = vals[c];
		}
	}
	return 0;
}

/* One snapshot, taken after every program is detached, gives the stats lines,
 * the histograms and (through tot) the result line, so they always agree. */
static void print_final(struct bpf_ringbuf *skel, int ncpus, unsigned long long tot[RB_PATHS][RB_STATS])
{
	unsigned long long per[ncpus * RB_PATHS * RB_STATS], vals[ncpus];
	int hist_fd = bpf_map__fd(skel->maps.hist);

	if (read_stats(bpf_map__fd(skel->maps.stats), ncpus, tot, per))
		return;
	for (int p = 0; p < RB_PATHS; p++) {
		for (int c = 0; c < ncpus; c++) {
			unsigned long long *s = &per[(size_t)c * RB_PATHS * RB_STATS + p * RB_STATS];
			char line[400], *w = line;

			if (!s[RB_RESERVES])
				continue;
			w += sprintf(w, "stats path=%s cpu=%d", path_names[p], c);
			for (int st = 0; st < RB_STATS; st++)
				w += sprintf(w, " %s=%llu", stat_names[st], s[st]);
			ksft_print_msg("%s\n", line);
		}
		/* hist: per CPU, nonzero log2 buckets as bucket=count */
		for (int c = 0; c < ncpus; c++) {
			char line[1024], *w = line;
			int any = 0;

			w += sprintf(w, "hist path=%s cpu=%d", path_names[p], c);
			for (__u32 b = 0; b < RB_BUCKETS; b++) {
				__u32 key = p * RB_BUCKETS + b;

				if (bpf_map_lookup_elem(hist_fd, &key, vals))
					break;
				if (vals[c]) {
					w += sprintf(w, " %u=%llu", b, vals[c]);
					any = 1;
				}
			}
			if (any)
				ksft_print_msg("%s\n", line);
		}
	}
}

/* what the main loop's step reads and keeps between progress lines */
static struct {
	struct bpf_ringbuf *skel;
	int ncpus;
	unsigned long long tot[RB_PATHS][RB_STATS];
	unsigned long long first_over;	/* NMI reserves at the first stall, +1; 0: none yet */
} loop;

static int step(unsigned long long elapsed_ms, unsigned long long *count)
{
	unsigned long long (*tot)[RB_STATS] = loop.tot;

	if (read_stats(bpf_map__fd(loop.skel->maps.stats), loop.ncpus, tot, NULL))
		return 1;
	*count = tot[RB_PATH_NMI][RB_RESERVES];
	ksft_print_msg("progress count=%llu elapsed_ms=%llu switch=%llu nmi_nulls=%llu switch_nulls=%llu "
		       "nmi_max_ns=%llu switch_max_ns=%llu nmi_over=%llu switch_over=%llu over=%llu\n",
		       tot[RB_PATH_NMI][RB_RESERVES], elapsed_ms, tot[RB_PATH_SWITCH][RB_RESERVES],
		       tot[RB_PATH_NMI][RB_NULLS], tot[RB_PATH_SWITCH][RB_NULLS], tot[RB_PATH_NMI][RB_MAX_NS],
		       tot[RB_PATH_SWITCH][RB_MAX_NS], tot[RB_PATH_NMI][RB_OVER], tot[RB_PATH_SWITCH][RB_OVER],
		       tot[RB_PATH_NMI][RB_OVER] + tot[RB_PATH_SWITCH][RB_OVER]);
	if (!loop.first_over && tot[RB_PATH_NMI][RB_OVER] + tot[RB_PATH_SWITCH][RB_OVER]) {
		loop.first_over = tot[RB_PATH_NMI][RB_RESERVES] + 1;
		ksft_print_msg("first-stall count=%llu elapsed_ms=%llu\n", loop.first_over - 1, elapsed_ms);
	}
	return 0;
}

static int perf_nmi_fds(int ncpus, unsigned freq, int *fds)
{
	struct perf_event_attr attr = { .size = sizeof(attr), .type = PERF_TYPE_HARDWARE,
					.config = PERF_COUNT_HW_CPU_CYCLES, .sample_freq = freq, .freq = 1 };

	for (int c = 0; c < ncpus; c++) {
		fds[c] = syscall(SYS_perf_event_open, &attr, -1, c, -1, PERF_FLAG_FD_CLOEXEC);
		if (fds[c] < 0) {
			int err = errno;

			while (c--)
				close(fds[c]);
			return -err;
		}
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bpf-ringbuf [options]\n"
		"  --duration S        run for S seconds (default 30)\n"
		"  --count N           stop after N NMI-context reserves (default: no limit)\n"
		"  --reserves N        reserve+discard per sched_switch (default 1, at most 64)\n"
		"  --ringbuf-mb N      ring buffer size (default 16)\n"
		"  --stall-ms MS       count sched_switch reserves this slow as stalls (default 300)\n"
		"  --nmi-stall-ms MS   count NMI-context reserves this slow as stalls (default 50)\n"
		"  --nmi-source SRC    auto (default), perf (hardware cycles) or inject (host NMIs)\n"
		"  --perf-freq HZ      perf_event sampling frequency (default 1000)\n"
		"  --pairs N           ping-pong thread pairs, one per CPU (default: every CPU)\n"
		"  --progress-ms MS    progress line interval (default 100)\n");
}

static int parse(int argc, char **argv, struct options *o, int ncpus)
{
	static const struct option longopts[] = {
		{ "duration", required_argument, NULL, 'd' }, { "count", required_argument, NULL, 'c' },
		{ "reserves", required_argument, NULL, 'r' }, { "ringbuf-mb", required_argument, NULL, 'm' },
		{ "stall-ms", required_argument, NULL, 's' }, { "nmi-stall-ms", required_argument, NULL, 'S' },
		{ "nmi-source", required_argument, NULL, 'n' },
		{ "perf-freq", required_argument, NULL, 'f' }, { "pairs", required_argument, NULL, 'p' },
		{ "progress-ms", required_argument, NULL, 'P' }, { "help", no_argument, NULL, 'h' }, { 0 }
	};
	int c;

	*o = (struct options){ .duration_s = 30, .reserves = 1, .ringbuf_mb = 16,
			       .stall_ns = { [RB_PATH_SWITCH] = 300000000ull, [RB_PATH_NMI] = 50000000ull },
			       .nmi_source = "auto", .perf_freq = 1000, .pairs = ncpus, .progress_ms = 100 };
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': o->duration_s = strtod(optarg, NULL); break;
		case 'c': o->count = strtoull(optarg, NULL, 0); break;
		case 'r': o->reserves = strtoul(optarg, NULL, 0); break;
		case 'm': o->ringbuf_mb = strtoul(optarg, NULL, 0); break;
		case 's': o->stall_ns[RB_PATH_SWITCH] = (unsigned long long)(strtod(optarg, NULL) * 1e6); break;
		case 'S': o->stall_ns[RB_PATH_NMI] = (unsigned long long)(strtod(optarg, NULL) * 1e6); break;
		case 'n': o->nmi_source = optarg; break;
		case 'f': o->perf_freq = strtoul(optarg, NULL, 0); break;
		case 'p': o->pairs = atoi(optarg); break;
		case 'P': o->progress_ms = strtoul(optarg, NULL, 0); break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	if (o->reserves < 1 || o->reserves > 64 || o->ringbuf_mb < 1 || (o->ringbuf_mb & (o->ringbuf_mb - 1)) ||
	    o->pairs < 0 || o->progress_ms < 1 || (strcmp(o->nmi_source, "auto") && strcmp(o->nmi_source, "perf") &&
						   strcmp(o->nmi_source, "inject"))) {
		usage(stderr);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int ncpus = libbpf_num_possible_cpus(), online = sysconf(_SC_NPROCESSORS_ONLN), inject = 0, err;
	unsigned long long elapsed_ms;
	struct bpf_ringbuf *skel;
	struct options o;
	int perf_fds[ncpus > 0 ? ncpus : 1];
	struct bpf_link *perf_links[ncpus > 0 ? ncpus : 1];
	struct pair *pairs;
	pthread_t *threads, consumer_thread;
	struct ring_buffer *ring;
	int nthreads = 0;

	if (ncpus < 1 || parse(argc, argv, &o, online))
		return 2;
	repro_start();
	ksft_print_msg("bpf-ringbuf: reserves=%u ringbuf_mb=%u stall_ms=%.1f nmi_stall_ms=%.1f duration_s=%.1f "
		       "count=%llu pairs=%d\n", o.reserves, o.ringbuf_mb, o.stall_ns[RB_PATH_SWITCH] / 1e6,
		       o.stall_ns[RB_PATH_NMI] / 1e6, o.duration_s, o.count, o.pairs);
	libbpf_set_print(libbpf_print);
	bpf_jit_on();

	/* NMI source: a PMU's cycles event in NMI context, else host injection */
	if (strcmp(o.nmi_source, "inject")) {
		err = perf_nmi_fds(ncpus, o.perf_freq, perf_fds);
		if (err && !strcmp(o.nmi_source, "perf"))
			ksft_exit_skip("bpf-ringbuf: no hardware perf_event: %s\n", strerror(-err));
		inject = err != 0;
	} else {
		inject = 1;
	}

	skel = bpf_ringbuf__open();
	if (!skel)
		ksft_exit_skip("bpf-ringbuf: open: %s\n", strerror(errno));
	skel->rodata->reserves_per_switch = o.reserves;
	memcpy(skel->rodata->stall_ns, o.stall_ns, sizeof(o.stall_ns));
	bpf_map__set_max_entries(skel->maps.rb, o.ringbuf_mb << 20);
	bpf_program__set_autoload(inject ? skel->progs.on_perf_nmi : skel->progs.on_nmi_handler, false);
	err = bpf_ringbuf__load(skel);
	if (err)
		ksft_exit_skip("bpf-ringbuf: BPF load: %s\n", strerror(-err));
	skel->links.on_switch = bpf_program__attach(skel->progs.on_switch);
	if (!skel->links.on_switch)
		ksft_exit_skip("bpf-ringbuf: attach tp_btf/sched_switch: %s\n", strerror(errno));
	if (inject) {
		skel->links.on_nmi_handler = bpf_program__attach(skel->progs.on_nmi_handler);
		if (!skel->links.on_nmi_handler)
			ksft_exit_skip("bpf-ringbuf: attach tp_btf/nmi_handler: %s\n", strerror(errno));
	} else {
		for (int c = 0; c < ncpus; c++)
			if (!(perf_links[c] = bpf_program__attach_perf_event(skel->progs.on_perf_nmi, perf_fds[c])))
				ksft_exit_skip("bpf-ringbuf: attach perf_event on CPU%d: %s\n", c, strerror(errno));
	}
	ring = ring_buffer__new(bpf_map__fd(skel->maps.rb), on_record, NULL, NULL);
	if (!ring)
		ksft_exit_skip("bpf-ringbuf: ring_buffer__new: %s\n", strerror(errno));
	pthread_create(&consumer_thread, NULL, consumer, ring);
	/* the host starts injecting when it reads this */
	ksft_print_msg("nmi-source: %s\n", inject ? "inject" : "perf");

	pairs = calloc(o.pairs ? o.pairs : 1, sizeof(*pairs));
	threads = calloc(2 * (o.pairs ? o.pairs : 1), sizeof(*threads));
	for (int i = 0; i < o.pairs; i++) {
		pairs[i].cpu = i % online;
		if (pipe(pairs[i].ab) || pipe(pairs[i].ba))
			break;
		pthread_create(&threads[nthreads++], NULL, pong, &pairs[i]);
		pthread_create(&threads[nthreads++], NULL, ping, &pairs[i]);
	}

	loop.skel = skel;
	loop.ncpus = ncpus;
	elapsed_ms = repro_loop(o.progress_ms, (unsigned long long)(o.duration_s * 1000), o.count, step);
	/* kernels that print every unknown NMI (6.1) would flood the console
	 * while the programs detach, which needs CPU0 */
	if (inject)
		ksft_print_msg("nmi-source: stop\n");
	atomic_store(&stop, 1);
	for (int i = 0; i < nthreads; i++)
		pthread_join(threads[i], NULL);
	pthread_join(consumer_thread, NULL);
	/* NMIs go on after the workload stops: detach before the final figures */
	if (!inject)
		for (int c = 0; c < ncpus; c++)
			bpf_link__destroy(perf_links[c]);
	bpf_ringbuf__detach(skel);
	print_final(skel, ncpus, loop.tot);
	ksft_print_msg("result count=%llu elapsed_ms=%llu switch=%llu\n", loop.tot[RB_PATH_NMI][RB_RESERVES],
		       elapsed_ms, loop.tot[RB_PATH_SWITCH][RB_RESERVES]);
	ring_buffer__free(ring);
	bpf_ringbuf__destroy(skel);
	if (loop.tot[RB_PATH_NMI][RB_RESERVES])
		ksft_test_result_pass("bpf-ringbuf\n");
	else
		ksft_test_result_skip("bpf-ringbuf: no NMI reached the NMI-context program\n");
	ksft_finished();
}
