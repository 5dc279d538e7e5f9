// SPDX-License-Identifier: GPL-2.0
/* The measuring instrument's own cost, and the cost of the building blocks a fault program can
 * use, all on the fault tracepoint in the same run (bpf_stats is per program):
 *   empty_fault    does nothing: what kernel.bpf_stats charges a program on this machine;
 *   percpu_fault   one per-CPU array increment (no key, no lock, no shared line);
 *   storage_fault  one task-local-storage lookup of the faulting thread and an increment
 *                  (what a per-thread counter costs). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} per_cpu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} per_task SEC(".maps");

SEC("tp_btf/page_fault_user")
int BPF_PROG(empty_fault)
{
	return 0;
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(percpu_fault)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&per_cpu, &zero);

	if (n)
		(*n)++;
	return 0;
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(storage_fault)
{
	__u64 *n = bpf_task_storage_get(&per_task, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);

	if (n)
		(*n)++;
	return 0;
}
