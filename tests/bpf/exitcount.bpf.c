// SPDX-License-Identifier: GPL-2.0
/* A test program: counts task exits per thread group and records the group's exit code when its
 * last task goes. It was the first program of headroom's BPF pipeline (CO-RE, skeleton, C++
 * owner); tests/integration/bpf_pipeline_test.cpp keeps that pipeline checked on its own, apart
 * from the sensors. tp_btf needs no tracefs. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "exitcount.h"

#ifndef SIGNAL_GROUP_EXIT
#define SIGNAL_GROUP_EXIT 0x00000004 /* include/linux/sched/signal.h */
#endif

char LICENSE[] SEC("license") = "GPL";

/* Every exit seen, for a cheap liveness check of the attachment. */
__u64 total_exits = 0;

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096); /* user space sets the real size before load */
	__type(key, __u32);        /* tgid */
	__type(value, struct exit_count);
} exit_counts SEC(".maps");

SEC("tp_btf/sched_process_exit")
int BPF_PROG(count_exit, struct task_struct *p)
{
	static const struct exit_count zero = {};
	__u32 tgid = BPF_CORE_READ(p, tgid);
	struct exit_count *c;

	__sync_fetch_and_add(&total_exits, 1);
	c = bpf_map_lookup_elem(&exit_counts, &tgid);
	if (!c) {
		bpf_map_update_elem(&exit_counts, &tgid, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&exit_counts, &tgid);
		if (!c)
			return 0;
	}
	__sync_fetch_and_add(&c->thread_exits, 1);
	/* do_exit() decrements signal->live before this tracepoint: 0 means the group is dead. */
	if (BPF_CORE_READ(p, signal, live.counter) == 0) {
		c->group_exits = 1;
		/* The group's status, as the parent sees it: exit_group() and fatal signals set it on
		 * the signal struct; the last task to go need not be the one that called it (a thread
		 * whose own exit was still under way when the leader's exit_group() began). */
		if (BPF_CORE_READ(p, signal, flags) & SIGNAL_GROUP_EXIT)
			c->exit_code = BPF_CORE_READ(p, signal, group_exit_code);
		else
			c->exit_code = BPF_CORE_READ(p, group_leader, exit_code);
	}
	return 0;
}
