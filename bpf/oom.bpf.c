// SPDX-License-Identifier: GPL-2.0
/* OOM kills: oom:mark_victim runs in the triggering task's context (the allocating task, for a
 * limit hit). Its arguments differ by kernel: the victim's task_struct and uid on new kernels,
 * only a pid on 6.8 and older; both programs are built and user space loads the one that the
 * kernel's btf_trace_mark_victim signature fits. Reaping progress comes from the oom_reaper's
 * tracepoints. */
#include "common.bpf.h"

static __always_inline __u64 mm_counter(struct mm_struct *mm, int member)
{
	long v = mm_rss_counter(mm, member);

	return v < 0 ? 0 : (__u64)v;
}

static __always_inline struct oom_victim_event *begin_victim_event(void)
{
	struct oom_victim_event *e = ring_reserve(&oom_ring, HR_RING_OOM, sizeof(*e));
	struct task_struct *cur;

	if (!e)
		return NULL;
	__builtin_memset(e, 0, sizeof(*e));
	e->type = HR_EV_OOM_VICTIM;
	e->ts_ns = bpf_ktime_get_ns();
	e->boot_ts_ns = bpf_ktime_get_boot_ns();
	cur = current_task();
	fill_task(&e->trigger, cur);
	e->trigger_cgroup_id = task_memcg_id(cur);
	return e;
}

/* What the CUDA sensor counts of the victim at the mark: its pinned and device memory at the
 * moment of the kill (the entry goes with the process, before user space could look). */
static __always_inline void victim_gpu(struct oom_victim_event *e, __u32 tgid)
{
	struct gpu_mem *g = bpf_map_lookup_elem(&gpu_mem, &tgid);

	if (!g)
		return;
	e->victim_gpu = *g;
	e->flags |= HR_OOM_VICTIM_GPU;
}

SEC("tp_btf/mark_victim")
int BPF_PROG(mark_victim_task, struct task_struct *victim, uid_t uid)
{
	struct oom_victim_event *e = begin_victim_event();
	struct mm_struct *mm;
	__u64 mm_id;
	__u32 tgid;

	if (!e)
		return 0;
	e->flags = HR_OOM_VICTIM_TASK;
	fill_task(&e->victim, victim);
	e->victim_uid = uid;
	e->victim_oom_score_adj = BPF_CORE_READ(victim, signal, oom_score_adj);
	e->victim_cgroup_id = task_memcg_id(victim);
	/* Kill skipped: the victim was already on its way out (task_will_free_mem). */
	if (BPF_CORE_READ(victim, flags) & PF_EXITING)
		e->flags |= HR_OOM_VICTIM_EXITING;
	mm = BPF_CORE_READ(victim, mm);
	mm_id = (__u64)mm;
	e->victim_mm = mm_id;
	if (mm) {
		e->victim_total_vm_pages = BPF_CORE_READ(mm, total_vm);
		e->victim_rss_file_pages = mm_counter(mm, HR_MM_FILEPAGES);
		e->victim_rss_anon_pages = mm_counter(mm, HR_MM_ANONPAGES);
		e->victim_swapents = mm_counter(mm, HR_MM_SWAPENTS);
		e->victim_rss_shmem_pages = mm_counter(mm, HR_MM_SHMEMPAGES);
		e->victim_pgtables_bytes = BPF_CORE_READ(mm, pgtables_bytes.counter);
		e->victim_locked_pages = BPF_CORE_READ(mm, locked_vm);
		e->victim_pinned_pages = BPF_CORE_READ(mm, pinned_vm.counter);
	}
	tgid = e->victim.tgid;
	victim_gpu(e, tgid);
	bpf_ringbuf_submit(e, 0);

	bpf_map_update_elem(&oom_victims, &tgid, &mm_id, BPF_ANY);
	if (mm_id)
		bpf_map_update_elem(&oom_mms, &mm_id, &tgid, BPF_ANY);
	return 0;
}

SEC("tp_btf/mark_victim")
int BPF_PROG(mark_victim_pid, int pid)
{
	struct oom_victim_event *e = begin_victim_event();
	__u32 key = pid;
	__u64 none = 0;

	if (!e)
		return 0;
	e->victim.pid = pid; /* a thread id; tgid and figures come from /proc and /dev/kmsg */
	victim_gpu(e, key); /* the CUDA counters are by process: found when the kernel marked the leader */
	bpf_ringbuf_submit(e, 0);
	/* Keyed by thread id: the exit program moves the mark to its thread group. */
	bpf_map_update_elem(&oom_victims, &key, &none, BPF_ANY);
	return 0;
}

static __always_inline int reap_event(int type, int pid)
{
	struct reap_event *e = ring_reserve(&oom_ring, HR_RING_OOM, sizeof(*e));

	if (!e)
		return 0;
	e->type = type;
	e->pid = pid;
	e->ts_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tp_btf/start_task_reaping")
int BPF_PROG(start_task_reaping, int pid)
{
	return reap_event(HR_EV_REAP_START, pid);
}

SEC("tp_btf/finish_task_reaping")
int BPF_PROG(finish_task_reaping, int pid)
{
	return reap_event(HR_EV_REAP_FINISH, pid);
}
