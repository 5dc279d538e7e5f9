// SPDX-License-Identifier: GPL-2.0
/* User page faults per process (exceptions:page_fault_user, x86 only). The hottest path a
 * prover has: one per-CPU counter bump, the cgroup filter in the kernel, nothing sent. Note
 * that MAP_POPULATE faults pages in without this tracepoint firing. */
#include "common.bpf.h"

SEC("tp_btf/page_fault_user")
int BPF_PROG(count_fault, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	static const struct fault_count zero = {};
	__u32 tgid;
	struct fault_count *c;

	if (!current_tracked())
		return 0;
	tgid = bpf_get_current_pid_tgid() >> 32;
	c = bpf_map_lookup_elem(&fault_counts, &tgid);
	if (!c) {
		bpf_map_update_elem(&fault_counts, &tgid, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&fault_counts, &tgid);
		if (!c)
			return 0;
	}
	c->faults++; /* per-CPU value: no atomic needed */
	return 0;
}
