// SPDX-License-Identifier: GPL-2.0
/* User page faults per process (exceptions:page_fault_user, x86 only). The hottest path a
 * prover has: one counter bump in the faulting thread's own task storage (no cache line shared
 * between threads), the cgroup filter in the kernel, nothing sent. Note
 * that MAP_POPULATE faults pages in without this tracepoint firing. */
#include "common.bpf.h"

SEC("tp_btf/page_fault_user")
int BPF_PROG(count_fault, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	struct thread_hot *h;

	if (!current_tracked())
		return 0;
	h = bpf_task_storage_get(&thread_hot, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (h)
		h->faults++; /* only this thread writes it */
	return 0;
}

/* Sums for user space: one line "tgid faults" per thread that has faulted. */
SEC("iter/task")
int dump_thread_faults(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct thread_hot *h;

	if (!task)
		return 0;
	h = bpf_task_storage_get(&thread_hot, task, 0, 0);
	if (!h || !h->faults)
		return 0;
	BPF_SEQ_PRINTF(ctx->meta->seq, "%d %llu\n", task->tgid, h->faults);
	return 0;
}
