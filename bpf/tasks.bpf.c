// SPDX-License-Identifier: GPL-2.0
/* The per-process source: a task iterator (iter/task, 5.8+) that writes one hr_task_record per
 * task to the reader. One read() per sample walks every task of the machine under RCU: no file
 * per process, no text to format in the kernel and parse back in user space. A program of its
 * own (not linked with the sensors): it loads, or fails, on its own. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "core_fixes.bpf.h"
#include "events.h"

#define PF_KTHREAD 0x00200000 /* include/linux/sched.h: I am a kernel thread */

/* Set by user space before load: the memory controller is on cgroup v1 (use the memory css);
 * the possible CPUs (the per-CPU parts of the RSS counters to add). */
const volatile bool cfg_memory_v1 = false;
const volatile __u32 cfg_nr_cpus = 1;
#define HR_MAX_CPUS 1024

/* The sensors' per-process maps (bpf/common.bpf.h), the same maps: user space hands this object
 * their file descriptors before load (bpf_map__reuse_fd). Alone, they are empty maps of its own. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct proc_activity);
} proc_activity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct gpu_mem);
} gpu_mem SEC(".maps");

/* The processes whose RSS counters are summed over every CPU (user space names them before each
 * read: those where the exact figure matters). Every other process's counters are read as their
 * folded `count` alone: one read each, however many CPUs the machine has. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HR_RSS_EXACT_MAX);
	__type(key, __u32);
	__type(value, __u8);
} rss_exact SEC(".maps");
__u32 rss_exact_count; /* how many rss_exact holds (user space keeps it): none, no lookup */

/* A per-CPU array of one slot: its per-CPU base (bpf_array.pptrs[0]) and each CPU's copy of it
 * tell that CPU's per-CPU offset, with no kernel symbol (kallsyms may lack data symbols). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cpu_offsets SEC(".maps");

/* A kernel pointer as a number (the verifier allows no arithmetic on a map's pointer). */
static __always_inline __u64 address_of(const void *p)
{
	__u64 a = 0;

	bpf_probe_read_kernel(&a, sizeof(a), &p);
	return a;
}

/* Each CPU's distance from the per-CPU map's base (its copy's address less the base), the same
 * for every task: found by the first task that needs them, kept for every later one. */
#define HR_NO_CPU ((__u64)-1)
__u64 cpu_off[HR_MAX_CPUS];
__u32 cpu_offs_found; /* how many CPUs' distances cpu_off holds; 0: not found yet */

static __always_inline __u32 cpu_offsets_found(void)
{
	__u64 base = 0, map;
	__u32 cpu, zero = 0;

	if (cpu_offs_found)
		return cpu_offs_found;
	map = address_of(&cpu_offsets);
	if (map)
		bpf_probe_read_kernel(&base, sizeof(base),
				      (const void *)(map + bpf_core_field_offset(struct bpf_array, pptrs)));
	if (!base)
		return 0;
	for (cpu = 0; cpu < HR_MAX_CPUS && cpu < cfg_nr_cpus; cpu++) {
		const void *copy = bpf_map_lookup_percpu_elem(&cpu_offsets, &zero, cpu);

		cpu_off[cpu] = copy ? address_of(copy) - base : HR_NO_CPU;
	}
	cpu_offs_found = cpu;
	return cpu;
}

/* Since 6.2 each RSS counter is a percpu_counter: `count` plus less than a batch per CPU not yet
 * folded in. The parts go into the record apart from the count; user space adds them, as /proc
 * does since get_mm_counter_sum(). A read per CPU: done only for the processes in `rss_exact`,
 * the others keep the count alone (as /proc showed it before get_mm_counter_sum()). Since 6.6 the four counters' per-CPU parts lie side by side
 * (percpu_counter_init_many): one read a CPU then, four before. */
static __always_inline void percpu_parts(struct mm_struct *mm, __s64 out[4])
{
	__s32 *parts[4];
	__u32 cpu, found = cpu_offsets_found();
	bool packed;

	if (!found)
		return;
	parts[HR_MM_FILEPAGES] = mm->rss_stat[HR_MM_FILEPAGES].counters;
	parts[HR_MM_ANONPAGES] = mm->rss_stat[HR_MM_ANONPAGES].counters;
	parts[HR_MM_SWAPENTS] = mm->rss_stat[HR_MM_SWAPENTS].counters;
	parts[HR_MM_SHMEMPAGES] = mm->rss_stat[HR_MM_SHMEMPAGES].counters;
	packed = (__u64)parts[1] == (__u64)parts[0] + 4 && (__u64)parts[2] == (__u64)parts[0] + 8 &&
		 (__u64)parts[3] == (__u64)parts[0] + 12;
	for (cpu = 0; cpu < HR_MAX_CPUS && cpu < found; cpu++) {
		__u64 off = cpu_off[cpu];
		int i;

		if (off == HR_NO_CPU)
			continue;
		if (packed) {
			__s32 v[4] = {};

			bpf_probe_read_kernel(v, sizeof(v), (const void *)((__u64)parts[0] + off));
			for (i = 0; i < 4; i++)
				out[i] += v[i];
			continue;
		}
		for (i = 0; i < 4; i++) {
			__s32 v = 0;

			bpf_probe_read_kernel(&v, sizeof(v), (const void *)((__u64)parts[i] + off));
			out[i] += v;
		}
	}
}

SEC("iter/task")
int dump_tasks(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *t = ctx->task;
	struct hr_task_record r = {};
	struct signal_struct *sig;
	struct mm_struct *mm;

	if (!t)
		return 0;
	r.pid = t->pid;
	r.tgid = t->tgid;
	if (t->flags & PF_KTHREAD) {
		r.flags = HR_TASK_KTHREAD;
		bpf_seq_write(seq, &r, sizeof(r));
		return 0;
	}
	r.min_flt = t->min_flt;
	r.maj_flt = t->maj_flt;
	if (r.pid != r.tgid) {
		r.flags = HR_TASK_THREAD;
		bpf_seq_write(seq, &r, sizeof(r));
		return 0;
	}
	/* Direct loads through the task's pointers (BTF-typed: the verifier turns each into a
	 * guarded load), not a helper call per field: this runs for every task of the machine. */
	sig = t->signal;
	r.ppid = t->real_parent->tgid;
	r.start_boottime_ns = t->start_boottime;
	__builtin_memcpy(r.comm, t->comm, sizeof(r.comm));
	r.cgroup_id = task_memory_cgroup_id_btf(t, cfg_memory_v1);
	r.uid = t->real_cred->uid.val;
	r.oom_score_adj = sig->oom_score_adj;
	r.threads = sig->nr_threads;
	/* /proc/<pid>/stat: the exited threads' faults, kept in the signal struct, plus the live
	 * threads' own (user space adds those from their records). */
	r.min_flt += sig->min_flt;
	r.maj_flt += sig->maj_flt;
	mm = t->mm;
	if (!mm) {
		r.flags = HR_TASK_NO_MM;
		bpf_seq_write(seq, &r, sizeof(r));
		return 0;
	}
	/* The mm's counters (user space clamps them at zero, as /proc does). */
	if (bpf_core_type_exists(struct mm_rss_stat___old)) {
		/* Read through the helper: a direct load through the flavour's cast pointer is
		 * refused by 6.1's verifier (the fields sit in mm_struct's anonymous struct). */
		r.rss_file = mm_rss_counter_pre_6_2(mm, HR_MM_FILEPAGES);
		r.rss_anon = mm_rss_counter_pre_6_2(mm, HR_MM_ANONPAGES);
		r.swapents = mm_rss_counter_pre_6_2(mm, HR_MM_SWAPENTS);
		r.rss_shmem = mm_rss_counter_pre_6_2(mm, HR_MM_SHMEMPAGES);
	} else {
		r.rss_file = mm->rss_stat[HR_MM_FILEPAGES].count;
		r.rss_anon = mm->rss_stat[HR_MM_ANONPAGES].count;
		r.swapents = mm->rss_stat[HR_MM_SWAPENTS].count;
		r.rss_shmem = mm->rss_stat[HR_MM_SHMEMPAGES].count;
		{
			__u32 tgid = r.tgid;

			if (rss_exact_count && bpf_map_lookup_elem(&rss_exact, &tgid)) {
				percpu_parts(mm, r.rss_cpu_parts);
				r.flags |= HR_TASK_RSS_PARTS;
			} else {
				r.flags |= HR_TASK_RSS_APPROX;
			}
		}
	}
	r.hiwater_rss = mm->hiwater_rss;
	r.total_vm = mm->total_vm;
	r.locked_vm = mm->locked_vm;
	r.pinned_vm = mm->pinned_vm.counter;
	r.pgtables_bytes = mm->pgtables_bytes.counter;
	{
		__u32 tgid = r.tgid;
		struct proc_activity *pa = bpf_map_lookup_elem(&proc_activity, &tgid);
		struct gpu_mem *g = bpf_map_lookup_elem(&gpu_mem, &tgid);

		if (pa) {
			r.activity = *pa;
			r.flags |= HR_TASK_ACTIVITY;
		}
		if (g) {
			r.gpu = *g;
			r.flags |= HR_TASK_GPU;
		}
	}
	bpf_seq_write(seq, &r, sizeof(r));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
