/* CO-RE across the kernels headroom runs on (5.15 to 6.18): each struct flavour below names the
 * kernel change it bridges, and each accessor picks the layout the running kernel has by BTF
 * (bpf_core_type_exists / bpf_core_field_exists), never by a version number. The `___suffix`
 * of a flavour is dropped by libbpf when it matches the kernel's types. */
#ifndef HEADROOM_CORE_FIXES_BPF_H
#define HEADROOM_CORE_FIXES_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>

/* Before 6.2, mm->rss_stat was a struct of atomic_long_t counters; "mm: convert mm's rss stats
 * into percpu_counter" (f1a7941243c1, Linux 6.2) made it an array of percpu_counter, whose
 * `count` is the approximate global value. */
struct mm_rss_stat___old {
	atomic_long_t count[4];
};
struct mm_struct___old {
	struct mm_rss_stat___old rss_stat;
};

/* The mm's RSS counters by member (include/linux/mm_types_task.h), the same on every kernel. */
enum { HR_MM_FILEPAGES = 0, HR_MM_ANONPAGES = 1, HR_MM_SWAPENTS = 2, HR_MM_SHMEMPAGES = 3 };

/* One of the mm's counters, in pages, on a kernel before 6.2. Constant indices only: a variable
 * index into a trusted pointer is refused by the verifier. */
static __always_inline long mm_rss_counter_pre_6_2(struct mm_struct *mm, int member)
{
	struct mm_struct___old *old = (void *)mm;

	switch (member) {
	case HR_MM_FILEPAGES: return BPF_CORE_READ(old, rss_stat.count[HR_MM_FILEPAGES].counter);
	case HR_MM_ANONPAGES: return BPF_CORE_READ(old, rss_stat.count[HR_MM_ANONPAGES].counter);
	case HR_MM_SWAPENTS: return BPF_CORE_READ(old, rss_stat.count[HR_MM_SWAPENTS].counter);
	default: return BPF_CORE_READ(old, rss_stat.count[HR_MM_SHMEMPAGES].counter);
	}
}

/* One of the mm's counters, in pages, whichever layout this kernel has (any mm pointer). */
static __always_inline long mm_rss_counter(struct mm_struct *mm, int member)
{
	if (bpf_core_type_exists(struct mm_rss_stat___old))
		return mm_rss_counter_pre_6_2(mm, member);
	switch (member) {
	case HR_MM_FILEPAGES: return BPF_CORE_READ(mm, rss_stat[HR_MM_FILEPAGES].count);
	case HR_MM_ANONPAGES: return BPF_CORE_READ(mm, rss_stat[HR_MM_ANONPAGES].count);
	case HR_MM_SWAPENTS: return BPF_CORE_READ(mm, rss_stat[HR_MM_SWAPENTS].count);
	default: return BPF_CORE_READ(mm, rss_stat[HR_MM_SHMEMPAGES].count);
	}
}

#define HR_CGROUP_SUBSYS_MAX 16 /* a bound for the verifier on an index into css_set->subsys[]: CGROUP_SUBSYS_COUNT varies with the kernel config */

/* A task's memory cgroup as a kernfs id: on v1 the memory css's cgroup, on v2 the task's own
 * cgroup (the default hierarchy's). The id is the cgroup directory's inode number. */
static __always_inline __u64 task_memory_cgroup_id(struct task_struct *t, bool memory_v1)
{
	if (memory_v1) {
		int id = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
		struct css_set *cs = BPF_CORE_READ(t, cgroups);
		struct cgroup_subsys_state *css = NULL;

		if (id < 0 || id >= HR_CGROUP_SUBSYS_MAX || !cs)
			return 0;
		bpf_core_read(&css, sizeof(css), &cs->subsys[id]);
		if (!css)
			return 0;
		return BPF_CORE_READ(css, cgroup, kn, id);
	}
	return BPF_CORE_READ(t, cgroups, dfl_cgrp, kn, id);
}

/* The same through plain loads, for a task that is a trusted BTF pointer (an iterator's): each
 * step a load the verifier guards, not a helper call (five a task on v1). */
static __always_inline __u64 task_memory_cgroup_id_btf(struct task_struct *t, bool memory_v1)
{
	struct css_set *cs = t->cgroups;

	if (memory_v1) {
		int id = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
		struct cgroup_subsys_state *css;

		if (id < 0 || id >= HR_CGROUP_SUBSYS_MAX)
			return 0;
		css = cs->subsys[id];
		if (!css)
			return 0;
		return css->cgroup->kn->id;
	}
	return cs->dfl_cgrp->kn->id;
}

#endif /* HEADROOM_CORE_FIXES_BPF_H */
