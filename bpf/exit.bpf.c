// SPDX-License-Identifier: GPL-2.0
/* Process exits, judged when the whole thread group is dead: the group's wait status (exit
 * code and terminating signal) and whether an OOM kill named it, so that user space can tell
 * exited(code), signaled(sig) and oom_killed apart. Per-process counters are dropped here. */
#include "common.bpf.h"

/* Removes every live CUDA allocation of one process (bpf_for_each_map_elem callback). */
static long drop_allocs_of(struct bpf_map *map, struct gpu_alloc_key *key, __u64 *size, void *ctx)
{
	__u32 *tgid = ctx;

	if (key->tgid == *tgid)
		bpf_map_delete_elem(map, key);
	return 0;
}

/* A process is gone: its fault total goes, and so does this CPU's run of it (runs on other
 * CPUs find no total when they end, and add nothing). */
static __always_inline void end_fault_runs_of(__u32 tgid)
{
	__u32 zero = 0;
	struct fault_run *r = bpf_map_lookup_elem(&fault_runs, &zero);

	bpf_map_delete_elem(&fault_totals, &tgid);
	if (r && r->tgid == tgid && r->mm) {
		r->seq++;
		r->mm = 0;
		r->count = 0;
		r->tracked = 0;
		r->seq++;
	}
}

/* sweep_allocs: drop the CUDA allocations of a process that exits holding some, which takes
 * bpf_for_each_map_elem (5.13). Where the kernel lacks it the CUDA sensor cannot load either
 * (it needs the helper too), so no allocation is ever recorded to sweep. */
static __always_inline int on_exit(struct task_struct *p, bool sweep_allocs)
{
	__u32 pid = BPF_CORE_READ(p, pid);
	__u32 tgid = BPF_CORE_READ(p, tgid);
	struct signal_struct *sig = BPF_CORE_READ(p, signal);
	struct exit_event *e;
	struct mm_struct *mm;
	__u32 flags = 0;
	__u64 mm_id, *marked, cgid;
	int code;

	/* Old kernels mark a thread id: carry the mark over to its thread group. */
	if (pid != tgid) {
		marked = bpf_map_lookup_elem(&oom_victims, &pid);
		if (marked) {
			__u64 none = 0;
			bpf_map_update_elem(&oom_victims, &tgid, &none, BPF_ANY);
			bpf_map_delete_elem(&oom_victims, &pid);
		}
	}
	/* do_exit() decrements signal->live before this tracepoint: 0 means the group is dead. */
	if (BPF_CORE_READ(sig, live.counter) != 0)
		return 0;
	end_fault_runs_of(tgid);

	if (bpf_map_lookup_elem(&oom_victims, &tgid)) {
		flags |= HR_EXIT_OOM_MARKED;
		bpf_map_delete_elem(&oom_victims, &tgid);
	}
	/* Processes sharing a victim's mm are killed without their own mark_victim. The mm is
	 * already detached here on most kernels; active_mm still names it. */
	mm = BPF_CORE_READ(p, mm);
	if (!mm)
		mm = BPF_CORE_READ(p, active_mm);
	mm_id = (__u64)mm;
	if (mm_id && bpf_map_lookup_elem(&oom_mms, &mm_id) && !(flags & HR_EXIT_OOM_MARKED))
		flags |= HR_EXIT_SHARES_OOM_MM;

	bpf_map_delete_elem(&proc_activity, &tgid); /* proc_hot goes with the task itself */
	if (bpf_map_lookup_elem(&gpu_mem, &tgid)) {
		/* Whatever it still held is released with it, never leaked in the counters. */
		bpf_map_delete_elem(&gpu_mem, &tgid);
		if (sweep_allocs)
			bpf_for_each_map_elem(&gpu_allocs, drop_allocs_of, &tgid, 0);
	}

	cgid = task_memcg_id(p);
	if (!flags && !cgroup_tracked(cgid))
		return 0;

	/* The wait status, as the parent will see it. */
	if (BPF_CORE_READ(sig, flags) & SIGNAL_GROUP_EXIT)
		code = BPF_CORE_READ(sig, group_exit_code);
	else
		code = BPF_CORE_READ(p, group_leader, exit_code);

	e = ring_reserve(&exit_ring, HR_RING_EXIT, sizeof(*e));
	if (!e)
		return 0;
	e->type = HR_EV_EXIT;
	e->flags = flags;
	e->ts_ns = bpf_ktime_get_ns();
	fill_task(&e->task, p);
	e->exit_code = code;
	e->parent_tgid = BPF_CORE_READ(p, real_parent, tgid);
	e->cgroup_id = cgid;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(handle_exit, struct task_struct *p)
{
	return on_exit(p, true);
}

/* Kernels before 5.13: the same without the sweep (user space loads one of the two). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(handle_exit_plain, struct task_struct *p)
{
	return on_exit(p, false);
}
