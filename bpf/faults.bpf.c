// SPDX-License-Identifier: GPL-2.0
/* User page faults per process (exceptions:page_fault_user, x86 only). The hottest path a
 * prover has, so a fault costs one per-CPU increment: each CPU counts the run of faults of the
 * process faulting on it (struct fault_run), and only when another process faults there is the
 * run added to that process's total, and the newcomer judged by the cgroup filter. A prover
 * faulting in gigabytes meets the slow path once per switch, not once per page. Nothing is
 * sent. Note that MAP_POPULATE faults pages in without this tracepoint firing. */
#include "common.bpf.h"

/* Ends a CPU's run: its faults go to their process's total, if that process is still the
 * one the total was made for (it is gone once the process has exited). */
static __always_inline void end_run(struct fault_run *r)
{
	struct fault_total *t;

	if (!r->tracked || !r->count)
		return;
	t = bpf_map_lookup_elem(&fault_totals, &r->tgid);
	if (t && t->mm == r->mm)
		__sync_fetch_and_add(&t->faults, r->count);
}

/* Begins a run for the current process: judged by the filter once, its total made if it has
 * none (or has one left by an earlier process with the same pid). */
static __always_inline void begin_run(struct fault_run *r, __u64 mm, __u32 tgid, __u32 gen)
{
	r->mm = mm;
	r->tgid = tgid;
	r->count = 0;
	r->filter_gen = gen;
	r->tracked = current_tracked();
	if (r->tracked) {
		struct fault_total fresh = {.faults = 0, .mm = mm};
		struct fault_total *t = lookup_or_init(&fault_totals, &tgid, &fresh);
		if (t && t->mm != mm) {
			/* A pid reused by another process: the old total is not this one's. */
			t->faults = 0;
			t->mm = mm;
		}
	}
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(count_fault, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	__u64 mm = (__u64)cur->mm;
	__u32 zero = 0, gen = filter_gen;
	struct fault_run *r = bpf_map_lookup_elem(&fault_runs, &zero);

	if (!r)
		return 0;
	/* Tracepoint programs run with preemption off: nothing else touches this CPU's slot. */
	if (r->mm == mm && r->filter_gen == gen) {
		r->count++;
		return 0;
	}
	r->seq++;
	end_run(r);
	begin_run(r, mm, cur->tgid, gen);
	r->count = 1;
	r->seq++;
	return 0;
}
