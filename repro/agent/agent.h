// SPDX-License-Identifier: GPL-2.0
/* kstall guest agent: the initramfs's /init.
 *
 * Each of its jobs is a file of its own; this header says what each offers
 * the others, and main.c only wires them.
 *
 * Prepares a bare guest for the reproducers (mounts, perf_event_paranoid=-1,
 * kptr_restrict=0), sends /proc/kallsyms to the host when asked, runs the
 * reproducer named on the kernel command line and forwards its TAP output,
 * and heartbeats with guest CLOCK_MONOTONIC so the host can tell the moment
 * the guest freezes. Everything goes over virtio-serial ports; the UART stays
 * for the kernel's own console.
 *
 * Kernel command line:
 *   kstall.repro=NAME   reproducer to run (/bin/NAME); "none" just reports
 *   kstall.args=A,B,C   its arguments, comma separated
 *   kstall.syms=1       send /proc/kallsyms (text and variables) and the BTF on the syms port
 *   kstall.hb_ms=N      heartbeat interval (default 50 ms)
 *   kstall.gate=1       after booting, say "ready" and wait for the host's "GO"
 *                       before starting the reproducer (the host boots guests
 *                       ahead while others still use the CPUs, and saves the
 *                       guest there as a snapshot that later runs restore)
 *
 * The host's GO line may carry what a restored guest cannot have had on its
 * command line, and what must differ between guests restored from one
 * snapshot:
 *   GO repro=NAME args=A,B,C syms=1 seed=HEX time=SEC.NSEC repeat=N seconds=S sleep=S
 *      hostfs=TAG cmd=HEX cwd=HEX health=L,P,M dying=S detect=S
 * repro, args and syms as on the command line (they override it), seed mixed
 * into the kernel's RNG and the CRNG reseeded, time set as CLOCK_REALTIME.
 * repeat: a program that knows nothing of kstall (a user's own) is run up to
 * N times, for at most S seconds, each completed run one pass of the count.
 * sleep: report a task of the reproducer's that sleeps in D state for S
 * seconds (see sleep_watch). hostfs: run a host command over the host's
 * root filesystem (see mount_host).
 *
 * Modules: a kernel whose virtio console or PCI transport is a module (=m)
 * cannot reach the host until they are loaded, so /etc/kstall/modules lists
 * the modules of lib/modules/kstall/ (beside the agent) to load first, in
 * dependency order; the host works out that list.
 *
 * As PID 1 (the initramfs's /init) the agent mounts the pseudo filesystems and
 * powers off when done. Started any other way (a service in a booted image,
 * `kstall verify --boot-image`) it finds them mounted and still powers off.
 * Reproducers are in bin/ beside the agent's own executable.
 *
 * Anything that keeps the agent from doing its job (a module that does not
 * load, no virtio port) is printed on the console as
 *   kstall-agent: error: WHAT
 * and the guest powers off at once: the host turns that line into the verdict.
 *
 * Host commands on the agent port: "GO" (see kstall.gate), "STOP": end the
 * reproducer early with SIGTERM, so it still prints its final results, and
 * "CORE": a stuck user-space reproducer (signal-malloc) is dumped. The agent
 * reports every thread's state, syscall and kernel stack from /proc, points
 * the kernel's core_pattern at itself (`init --core`, which stores the piped
 * core in /tmp) and sends SIGABRT; once the reproducer is gone the core goes
 * to the host on the syms port, as "CORE <bytes>" and the bytes, and the
 * agent waits (bounded) for the host's "CORE-OK" before it powers off.
 * Likewise after sending the symbols: "SYMS-OK" (a guest with nothing to run
 * powered off before its symbols had crossed, and the capture lost them).
 *
 * The reproducer's own output is forwarded a line at a time behind "| ", so
 * that nothing it prints can be read as one of the agent's lines (a program
 * that printed "KSTALL exit code=0" or "HB ..." once spoke for the agent);
 * the agent's own KTAP for a program that knows nothing of kstall is not.
 * Agent channel lines (host parses these; "| LINE" is the reproducer's):
 *   KSTALL hello uname=R cpus=N init=COMM  (COMM: PID 1's name: init, the agent, or the
 *                                          image's own init under --boot-image)
 *   KSTALL syms bytes=B lines=L data_lines=D btf_bytes=N ms=T  (blobs KALLSYMS, KDATA, BTF)
 *   KSTALL thread tid=T comm=C state=S syscall=NR,ARG0,.. kstack=F1,F2..  (on CORE)
 *   KSTALL core bytes=B exe=PATH ms=T | KSTALL core error=WHAT
 *   KSTALL ready                      (gated: waiting for "GO" from the host)
 *   KSTALL dstate tid=T pid=P comm=C secs=S wchan=W kstack=F1,F2..  (GO sleep=S)
 *   HB seq mono_ns count
 *   KSTALL health secs=N starved_s=N oom_kills=N ...  (after the program: see health_watch)
 *   KSTALL exit code=C
 *   KSTALL poweroff
 */
#ifndef KSTALL_AGENT_H
#define KSTALL_AGENT_H

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/random.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/wait.h>

#define AGENT_PORT "org.kstall.agent"
#define SYMS_PORT "org.kstall.syms"
#define CORE_FILE "/tmp/kstall-core"
/* the agent's own accounts, where no program reaches them: a dot directory
 * of the guest's root, which a program's own root (env root) leaves out and
 * no program's directory names (a root program could write or delete
 * /tmp's, and so the "needs" the host reads from it) */
#define AGENT_DIR "/.kstall"
#define MODPROBE_LOG AGENT_DIR "/modprobe.log"
#define TRACING "/sys/kernel/tracing"
#define MAX_CHECKS 32

/* files.c: a value written, a small file read, a directory made */
void write_file(const char *path, const char *val);
void read_small(const char *path, char *out, size_t len);
void make_dirs(const char *path, mode_t mode);

/* channel.c: lines and blobs to the host, its commands in */
extern int agent_fd;
extern char go_line[8192];		/* the host's GO, with its parameters */
unsigned long long mono_ns(void);
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void say_fd(int fd, const char *buf, size_t len);
void env_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));  /* "# kstall-env: ..." */
int open_port(const char *name);
int send_blob(const char *tag, const char *buf, size_t len);
int cmdline_get(const char *cmdline, const char *key, char *out, size_t outlen);
void on_command(const char *word, void (*serve)(const char *arg));
void host_commands(const char *until);
void *command_reader(void *arg);
void power_off(void);
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));  /* then powers off */

/* boot.c: where the agent is, the modules it loads first, the pseudo file systems */
extern char base_dir[256];		/* where the agent's executable is: "" for / */
void find_base_dir(void);
void load_modules(void);
void mount_all(void);

/* debugger.c: symbols and BTF, a stuck program's threads and core */
extern char repro_exe[256];
extern atomic_int core_requested, core_acked, syms_sent, syms_acked;
void send_kallsyms(void);
void request_core(int pid);
void core_command(const char *arg);	/* CORE, CORE-OK, SYMS-OK */
void core_ok_command(const char *arg);
void syms_ok_command(const char *arg);
int store_core(void);
void send_core(void);
void flatten_stack(char *stack);

/* tasks.c: sleeping hangs, and the tasks the host asks about */
extern unsigned sleep_after_s;		/* 0: not watched (GO sleep=S) */
extern int watch_all;			/* env watch-all: every user process */
int kernel_thread(const char *p);
void say_task(const char *tag, const char *task_dir, const char *tid, int pid, unsigned long long secs,
	      char *stack);
void tasks_command(const char *arg);	/* TASKS tid,tid,.. */
void *sleep_watch(void *arg);

/* heartbeat.c: the heartbeat, and what a GO brings */
extern atomic_ullong progress_count;
extern atomic_int hb_stop;
extern unsigned hb_ms;
void *heartbeat(void *arg);
void apply_go(void);

/* hostcmd.c: a host command over the host's root */
extern char host_cmd[2048], host_cwd[1024];
void mount_host(void);
void exec_host_command(void);

/* env.c: a guest environment's steps */
extern char env_cwd[256], env_root[256], env_checks[MAX_CHECKS][256];
extern int env_trace, env_timebox, env_nchecks;
void setup_env(const char *name);

/* devices.c: request_module()'s modprobe, device nodes and links */
int modprobe_main(int argc, char **argv);
void static_nodes(void);
void device_links(void);
int run_wait(char *const argv[]);	/* run a program (a full path), wait: its exit code or 128 + signal */
void start_uevents(void);		/* env uevents: a device's driver loaded by its alias as it appears */

/* account.c: what the environment saw of the program */
void report_env(void);

/* health.c: whether the program ran as intended */
void health_start(void);
void health_reaped(int status, int agent_killed);
void health_say(void);

/* run.c: the program run, its output forwarded, what is left killed */
extern atomic_int repro_pid, stop_sent;
void kill_all(unsigned bound_ms, int say_leftovers);
int run_repro(const char *name, char *args, unsigned long long deadline, int *cut);
int run_timeboxed(const char *name, const char *args, unsigned long long seconds, unsigned dying_s,
		  unsigned detect_s);
void stop_command(const char *arg);	/* STOP */

/* timeup.c: whether a time box's kill may come yet */
extern unsigned detect_s;	/* GO detect=S: the kernel's time to report a task asleep at the time-up */
void hold_command(const char *arg);	/* HOLD S */
int held(void);
int time_up(unsigned long long *grace_from);
int run_repeated(const char *name, const char *args, unsigned long long repeat, unsigned long long seconds);

#endif
