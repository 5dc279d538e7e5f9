/* THE kernel/user ABI of headroom: every struct and enum that crosses a BPF map or ring
 * buffer. Fixed-width types, no pointers, explicit padding; sizes asserted on both sides. */
#ifndef HEADROOM_BPF_EVENTS_H
#define HEADROOM_BPF_EVENTS_H

#ifdef __cplusplus
#include <linux/types.h>
#define HEADROOM_STATIC_ASSERT(c, m) static_assert(c, m)
#elif defined(__bpf__)
#define HEADROOM_STATIC_ASSERT(c, m) _Static_assert(c, m)
#else
#include <linux/types.h>
#define HEADROOM_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#define HR_COMM_LEN 16

/* Ring buffers, each with its own drop counter (index into `ring_drops`). OOM kills and
 * exits have a ring of their own so that nothing else can crowd them out. */
enum hr_ring {
	HR_RING_OOM = 0,   /* OOM victims and reaping */
	HR_RING_EXIT = 1,  /* process exits */
	HR_RING_COUNT = 2,
};

enum hr_event_type {
	HR_EV_OOM_VICTIM = 1,
	HR_EV_REAP_START = 2,
	HR_EV_REAP_FINISH = 3,
	HR_EV_EXIT = 4,
};

struct hr_task {
	__u32 pid;   /* thread id */
	__u32 tgid;  /* process id */
	char comm[HR_COMM_LEN];
};
HEADROOM_STATIC_ASSERT(sizeof(struct hr_task) == 24, "hr_task ABI");

/* CUDA memory per process, from uprobes on the driver (and optionally runtime) API. */
struct gpu_mem {
	__u64 pinned_live;
	__u64 pinned_peak;
	__u64 pinned_allocs;
	__u64 pinned_frees;
	__u64 device_live;
	__u64 device_peak;
	__u64 device_allocs;
	__u64 device_frees;
	__u64 failed_calls;   /* calls that returned an error: counted, never sized */
	__u64 implicit_frees; /* bytes released by context destruction */
};
HEADROOM_STATIC_ASSERT(sizeof(struct gpu_mem) == 80, "gpu_mem ABI");

/* oom:mark_victim. The trigger is the task the tracepoint runs in (the allocating task, for a
 * limit hit). On kernels whose tracepoint carries only a pid (6.8 and older), the victim's
 * figures are absent (flags lack HR_OOM_VICTIM_TASK) and come from /dev/kmsg. */
#define HR_OOM_VICTIM_TASK (1u << 0)   /* victim fields below come from its task_struct */
#define HR_OOM_VICTIM_EXITING (1u << 1) /* the victim was already exiting when marked */
#define HR_OOM_VICTIM_GPU (1u << 2)     /* victim_gpu holds the CUDA sensor's counters of the victim */
struct oom_victim_event {
	__u32 type;              /* HR_EV_OOM_VICTIM */
	__u32 flags;
	__u64 ts_ns;             /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	__u64 boot_ts_ns;        /* CLOCK_BOOTTIME */
	struct hr_task trigger;
	__u64 trigger_cgroup_id; /* memory cgroup (v1) or unified cgroup (v2) inode number */
	struct hr_task victim;
	__u32 victim_uid;
	__s32 victim_oom_score_adj;
	__u64 victim_cgroup_id;
	__u64 victim_mm;         /* opaque: tells processes sharing the victim's mm */
	__u64 victim_total_vm_pages;
	__u64 victim_rss_file_pages;
	__u64 victim_rss_anon_pages;
	__u64 victim_swapents;
	__u64 victim_rss_shmem_pages;
	__u64 victim_pgtables_bytes;
	__u64 victim_locked_pages; /* mm->locked_vm: mlock'd pages */
	__u64 victim_pinned_pages; /* mm->pinned_vm: pages pinned for DMA (pin_user_pages & co.) */
	struct gpu_mem victim_gpu; /* at the mark (HR_OOM_VICTIM_GPU): what it held pinned and on the device */
};
HEADROOM_STATIC_ASSERT(sizeof(struct oom_victim_event) == 248, "oom_victim_event ABI");

struct reap_event {
	__u32 type;  /* HR_EV_REAP_START / HR_EV_REAP_FINISH */
	__u32 pid;
	__u64 ts_ns;
};
HEADROOM_STATIC_ASSERT(sizeof(struct reap_event) == 16, "reap_event ABI");

#define HR_EXIT_OOM_MARKED (1u << 0)      /* oom:mark_victim named this process */
#define HR_EXIT_SHARES_OOM_MM (1u << 1)   /* it shared the mm of a marked victim */
struct exit_event {
	__u32 type;  /* HR_EV_EXIT */
	__u32 flags;
	__u64 ts_ns;
	struct hr_task task;  /* the last task of the group; pid = tgid for the leader */
	__s32 exit_code;      /* wait status: (code << 8) | terminating signal */
	__u32 parent_tgid;    /* real_parent's tgid at the exit: a child the parent's sampler never saw */
	__u64 cgroup_id;
};
HEADROOM_STATIC_ASSERT(sizeof(struct exit_event) == 56, "exit_event ABI");

/* Per CPU, the run of page faults it is counting: those of one process (an mm and its tgid)
 * since that process began faulting here. A fault of the same process is one increment of a
 * per-CPU counter (no lock, no atomic, no shared line, no map lookup beyond the per-CPU slot);
 * another process's fault ends the run, which is then added to `fault_totals`. User space adds
 * the runs still open to the totals; `seq` is odd while a run is being replaced, so that a
 * reader that copied a slot twice knows whether the two copies are of the same run. */
struct fault_run {
	__u64 mm;       /* the process's mm (pointer value): same mm, same process */
	__u64 count;    /* faults of this run, not yet in fault_totals */
	__u32 tgid;
	__u32 tracked;  /* 1 when the process is in a tracked cgroup (judged when the run began) */
	__u32 seq;      /* bumped before and after each replacement: odd while it happens */
	__u32 filter_gen; /* the cgroup filter's generation the judgement was made under */
};
HEADROOM_STATIC_ASSERT(sizeof(struct fault_run) == 32, "fault_run ABI");

/* Per process (tgid), the faults of its ended runs. `mm` tells a reused pid from the process
 * the entry was made for; the exit program removes the entry with the process. */
struct fault_total {
	__u64 faults;
	__u64 mm;
};
HEADROOM_STATIC_ASSERT(sizeof(struct fault_total) == 16, "fault_total ABI");

/* Per process, its RSS counters: task local storage of the thread-group leader, read by user
 * space through a pidfd of the process; it goes away with the process. */
struct proc_hot {
	__u64 _unused;
	/* kmem:rss_stat: the mm's counters at the last change, in pages */
	__u64 rss_file_pages;
	__u64 rss_anon_pages;
	__u64 rss_swapents;
	__u64 rss_shmem_pages;
	__u64 rss_updates; /* writes of the above (each after a move of RSS_STEP_PAGES or more) */
};
HEADROOM_STATIC_ASSERT(sizeof(struct proc_hot) == 48, "proc_hot ABI");

/* Per process, its mapping activity (one entry per tgid, LRU-bounded). */
struct proc_activity {
	__u64 mmap_bytes;
	__u64 munmap_bytes;
	__u64 mremap_grow_bytes;
	__u64 mremap_shrink_bytes;
	__u64 mlock_bytes;
	__u64 munlock_bytes;
};
HEADROOM_STATIC_ASSERT(sizeof(struct proc_activity) == 48, "proc_activity ABI");

enum hr_alloc_kind {
	HR_ALLOC_PINNED = 1,
	HR_ALLOC_DEVICE = 2,
};

/* One live allocation, so that a free subtracts the size that was allocated. */
struct gpu_alloc_key {
	__u32 tgid;
	__u32 kind;  /* enum hr_alloc_kind */
	__u64 addr;  /* host pointer, device pointer, or VMM handle */
};
HEADROOM_STATIC_ASSERT(sizeof(struct gpu_alloc_key) == 16, "gpu_alloc_key ABI");

/* One task of the machine, as the task iterator (iter/task) sees it: one fixed-size record per
 * thread, read in one pass per sample instead of a dozen /proc files per process. The figures are
 * the ones /proc/<pid>/status and /proc/<pid>/stat show, from the same kernel fields. A thread
 * other than the group leader carries only its ids and its own fault counts (HR_TASK_THREAD);
 * user space adds those to the leader's. */
#define HR_TASK_THREAD (1u << 0)  /* not the group leader: ids and faults only */
#define HR_TASK_KTHREAD (1u << 1) /* a kernel thread: ids only */
#define HR_TASK_NO_MM (1u << 2)   /* a leader without an mm (exiting, or a zombie leader) */
#define HR_TASK_ACTIVITY (1u << 3) /* `activity` holds the mmap sensor's counters of the process */
#define HR_TASK_GPU (1u << 4)      /* `gpu` holds the CUDA sensor's counters of the process */
#define HR_TASK_RSS_PARTS (1u << 5) /* per-CPU RSS counters (6.2+): `rss_cpu_parts` holds their unfolded parts */
#define HR_TASK_RSS_APPROX (1u << 6) /* per-CPU RSS counters (6.2+) whose parts were not read: `count` alone */
/* How many processes at most the task iterator sums exactly on a kernel with per-CPU RSS
 * counters (the `rss_exact` map, filled by user space): a sum costs a read per possible CPU. */
#define HR_RSS_EXACT_MAX 256
struct hr_task_record {
	__u32 pid;               /* thread id (init pid namespace) */
	__u32 tgid;              /* process id */
	__u32 flags;             /* HR_TASK_* */
	__u32 ppid;              /* real parent's tgid */
	__u64 start_boottime_ns; /* the leader's start, CLOCK_BOOTTIME: /proc/<pid>/stat's starttime */
	char comm[HR_COMM_LEN];
	__u64 cgroup_id;         /* memory cgroup (v1: the memory css's cgroup) or v2 cgroup, kernfs id */
	__u32 uid;               /* real uid */
	__s32 oom_score_adj;
	__u32 threads;           /* signal->nr_threads */
	__u32 _pad;
	__u64 min_flt;           /* this thread's; the leader's record adds the exited threads' */
	__u64 maj_flt;
	/* The mm's counters, in pages (leader records only), as the kernel holds them: an atomic
	 * before 6.2, a per-CPU counter's folded `count` since (which may dip below zero) */
	__s64 rss_file;
	__s64 rss_anon;
	__s64 swapents;
	__s64 rss_shmem;
	__u64 hiwater_rss;
	__u64 total_vm;
	__u64 locked_vm;
	__u64 pinned_vm;
	__u64 pgtables_bytes;
	/* The sensors' per-process maps, looked up in the same pass (the task iterator shares
	 * them with the sensors' object): no syscall per process for them either. */
	struct proc_activity activity;
	struct gpu_mem gpu;
	/* Since 6.2: the per-CPU parts of file, anon, swap, shmem not yet folded into `count`,
	 * which /proc/<pid>/status adds too since get_mm_counter_sum() (6.16 and stable trees). */
	__s64 rss_cpu_parts[4];
};
HEADROOM_STATIC_ASSERT(sizeof(struct hr_task_record) == 312, "hr_task_record ABI");

#endif /* HEADROOM_BPF_EVENTS_H */
