// SPDX-License-Identifier: GPL-2.0
/* Live RSS per process from kmem:rss_stat. 6.2+ passes (mm, member) and fires on every change;
 * before 6.2 it passes (mm, member, count) and fires only when per-task counters sync. Both
 * programs are built; user space loads the one the kernel's signature fits. `member` also
 * counts swap entries (MM_SWAPENTS), kept apart from RSS. */
#include "common.bpf.h"

/* How far a recorded counter may lag the mm's own, in pages (256 KiB). rss_stat fires on every
 * fault, from every thread of the process, and the counters live in the leader's storage: writing
 * them each time would bounce that cache line between the CPUs the threads fault on, the largest
 * cost headroom put on the fault path. A write only when the value moved this far keeps the line
 * shared (read-only) nearly always; what user space reads is within this of the kernel's figure
 * (itself a per-CPU-batched approximation since 6.2), decreases included. */
#define RSS_STEP_PAGES 64

static __always_inline void store(struct proc_hot *h, __u64 *slot, long count)
{
	__u64 now = count < 0 ? 0 : count;
	__u64 was = *slot;

	if (h->rss_updates && (now > was ? now - was : was - now) < RSS_STEP_PAGES)
		return;
	*slot = now;
	h->rss_updates++;
}

static __always_inline int record(struct mm_struct *mm, int member, long count)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	struct proc_hot *h;

	/* Only changes a process makes to its own mm (faults, mappings: nearly all of them). One
	 * made from elsewhere (reclaim by kswapd, process_madvise) is left out: the owner's next
	 * change carries the counter's new value anyway, and the owner pointer is not one the
	 * verifier lets us store through. */
	if ((void *)cur->mm != (void *)mm)
		return 0;
	if (!current_tracked())
		return 0;
	h = proc_hot_of(cur->group_leader);
	if (!h)
		return 0;
	switch (member) {
	case HR_MM_FILEPAGES: store(h, &h->rss_file_pages, count); break;
	case HR_MM_ANONPAGES: store(h, &h->rss_anon_pages, count); break;
	case HR_MM_SWAPENTS: store(h, &h->rss_swapents, count); break;
	case HR_MM_SHMEMPAGES: store(h, &h->rss_shmem_pages, count); break;
	default: break;
	}
	return 0;
}

static __always_inline long mm_count(struct mm_struct *mm, int member)
{
	if (bpf_core_type_exists(struct mm_rss_stat___old))
		return mm_rss_counter_pre_6_2(mm, member);
	/* mm is a trusted BTF pointer here: plain loads (CO-RE relocated), no probe_read, on the
	 * fault path. Constant indices only: a variable one into a trusted pointer is refused. */
	switch (member) {
	case HR_MM_FILEPAGES: return mm->rss_stat[HR_MM_FILEPAGES].count;
	case HR_MM_ANONPAGES: return mm->rss_stat[HR_MM_ANONPAGES].count;
	case HR_MM_SWAPENTS: return mm->rss_stat[HR_MM_SWAPENTS].count;
	default: return mm->rss_stat[HR_MM_SHMEMPAGES].count;
	}
}

SEC("tp_btf/rss_stat")
int BPF_PROG(rss_stat_new, struct mm_struct *mm, int member)
{
	if (member < HR_MM_FILEPAGES || member > HR_MM_SHMEMPAGES)
		return 0;
	return record(mm, member, mm_count(mm, member));
}

SEC("tp_btf/rss_stat")
int BPF_PROG(rss_stat_old, struct mm_struct *mm, int member, long count)
{
	/* The argument is in pages (the event's own `size` field is what is shifted to bytes). */
	return record(mm, member, count);
}
