/* Helpers and shared state of headroom's BPF programs. Each *.bpf.c is one concern; they are
 * linked into one object (bpftool gen object), so the maps below are defined __weak here and
 * merged, and the configuration lives once in common.bpf.c. */
#ifndef HEADROOM_COMMON_BPF_H
#define HEADROOM_COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "core_fixes.bpf.h"
#include "events.h"

/* Kernel constants that vmlinux.h cannot carry (they are #defines), with where they live. */
#define PF_EXITING 0x00000004        /* include/linux/sched.h: getting shut down */
#define SIGNAL_GROUP_EXIT 0x00000004 /* include/linux/sched/signal.h: group exit in progress */
#define E2BIG 7                      /* include/uapi/asm-generic/errno-base.h: a full map's refusal */
#define MAX_ERRNO 4095               /* include/linux/err.h: a syscall's -errno lies in [-MAX_ERRNO, -1] */

/* Configuration, set by user space before load (common.bpf.c defines them). */
extern const volatile bool cfg_filter_cgroups;  /* false: every cgroup is tracked */
extern const volatile bool cfg_cgroup_v1;       /* memory controller on v1: use the memory css */
/* Bumped by user space each time it changes `tracked_cgroups`: judgements cached under an older
 * generation are made again. */
extern __u32 filter_gen;

/* Lost events, per ring (enum hr_ring); user space exports them. */
extern __u64 ring_drops[HR_RING_COUNT];
/* Map inserts refused because a map was full (non-LRU maps only). */
extern __u64 map_full_drops;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} oom_ring SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} exit_ring SEC(".maps") __weak;

/* Memory cgroups to track (cgroup inode number -> 1), when cfg_filter_cgroups. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u8);
} tracked_cgroups SEC(".maps") __weak;

/* Processes (tgid) named by oom:mark_victim, and their mm, until they exit. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} oom_victims SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64); /* mm pointer value */
	__type(value, __u32); /* victim tgid */
} oom_mms SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct proc_hot);
} proc_hot SEC(".maps") __weak;

/* Page faults: the run each CPU is counting, and per process the runs that have ended. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fault_run);
} fault_runs SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct fault_total);
} fault_totals SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct proc_activity);
} proc_activity SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct gpu_mem);
} gpu_mem SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct gpu_alloc_key);
	__type(value, __u64); /* size */
} gpu_allocs SEC(".maps") __weak;

static __always_inline void *lookup_or_init(void *map, const void *key, const void *zero)
{
	void *v = bpf_map_lookup_elem(map, key);
	if (v)
		return v;
	if (bpf_map_update_elem(map, key, zero, BPF_NOEXIST) == -E2BIG)
		__sync_fetch_and_add(&map_full_drops, 1);
	return bpf_map_lookup_elem(map, key);
}

/* The id of a task's memory cgroup: the memory css's cgroup on v1 (bpf_get_current_cgroup_id
 * is the v2 id), the default hierarchy's cgroup on v2. Equal to the cgroup directory's inode. */
static __always_inline __u64 task_memcg_id(struct task_struct *t)
{
	return task_memory_cgroup_id(t, cfg_cgroup_v1);
}

static __always_inline bool cgroup_tracked(__u64 cgid)
{
	if (!cfg_filter_cgroups)
		return true;
	return bpf_map_lookup_elem(&tracked_cgroups, &cgid) != NULL;
}

/* The hot counters of a process: task storage of its thread-group leader, made on first use. */
static __always_inline struct proc_hot *proc_hot_of(struct task_struct *leader)
{
	return bpf_task_storage_get(&proc_hot, leader, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

/* The current task, for BPF_CORE_READ: bpf_get_current_task_btf where the kernel has it (5.11,
 * "bpf: Implement get_current_task_btf and RET_PTR_TO_BTF_ID"), else the same pointer untyped
 * from bpf_get_current_task. The test is a CO-RE relocation against the kernel's own enum
 * bpf_func_id, resolved at load: the verifier never walks the branch with the absent helper. */
static __always_inline struct task_struct *current_task(void)
{
	if (bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_get_current_task_btf))
		return bpf_get_current_task_btf();
	return (struct task_struct *)bpf_get_current_task();
}

static __always_inline bool current_tracked(void)
{
	if (!cfg_filter_cgroups)
		return true;
	return cgroup_tracked(task_memcg_id(current_task()));
}

static __always_inline void fill_task(struct hr_task *out, struct task_struct *t)
{
	out->pid = BPF_CORE_READ(t, pid);
	out->tgid = BPF_CORE_READ(t, tgid);
	BPF_CORE_READ_STR_INTO(&out->comm, t, comm);
}

/* Reserves ring space; a full ring is a counted drop, never a silent one. */
static __always_inline void *ring_reserve(void *ring, int which, __u64 size)
{
	void *e = bpf_ringbuf_reserve(ring, size, 0);
	if (!e && which >= 0 && which < HR_RING_COUNT)
		__sync_fetch_and_add(&ring_drops[which], 1);
	return e;
}

#endif /* HEADROOM_COMMON_BPF_H */
